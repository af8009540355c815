"""What bench/export_opt350m.py and bench/export_gpt2.py share: a transformers decoder wrapped to
return the logits of the next token (as bench/model_sweep.py wraps decoders), exported to ONNX in
training mode with a dynamic batch, random weights, nothing downloaded."""

import warnings

import torch


def export_next_token(model, path, sequence, vocabulary):
    """Exports `model` (a transformers ...ForCausalLM) to `path` over sequences of `sequence`
    tokens below `vocabulary`, with an attention mask; prints its parameter count."""

    class NextToken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
            return out.logits[:, -1]

    ids = torch.randint(3, vocabulary, (2, sequence))
    mask = torch.ones(2, sequence, dtype=torch.int64)
    names = ["input_ids", "attention_mask"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(NextToken().train(), (ids, mask), path, dynamo=False, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=names, output_names=["logits"],
                          dynamic_axes={n: {0: "batch"} for n in names + ["logits"]})
    print(f"{path}: {sum(p.numel() for p in model.parameters())} parameters")
