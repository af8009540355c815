"""The model suite of scripts/export_onnx.py --suite: common PyTorch training models, exported as a
user would export them, each with PyTorch's own training step on a fixed batch as the reference
that tests/onnx_suite_test.cc compares placer's step with (tests/pytorch_step.h). FIXTURES are
exported and referenced the same way as fixtures of scripts/export_onnx.py, for
tests/onnx_models_test.cc: t5 (transformers' T5ForConditionalGeneration) and conv1d (1-D
convolutions as sequence models use them).

Every model is exported in training mode (torch.onnx.TrainingMode.TRAINING), the graph placer's
training step runs: BatchNormalization normalises with the minibatch's statistics and Dropout
nodes are training-mode ones. Weights are torchvision's random initialisation (weights=None, no
download) with a seeded perturbation that makes every parameter and buffer distinct (the exporter
would merge equal initializers). Inputs are small where the architecture allows (64x64 images;
Inception-V3's minimum 75; VGG-11's 224, below which its adaptive pooling does not export), and the
export batch (3) differs from the reference batch (2), so that loading the reference exercises the
dynamic batch axis. Stochastic depth (EfficientNet-B0, ConvNeXt-Tiny) is set to 0: it draws its
mask with random ops the loader does not take, and is the identity then.

<model>.reference.onnx holds, as the initializers of an otherwise empty ONNX graph:
  input:<name>        the reference minibatch, per graph input
  labels              int64 [batch], uniform over the classes
  loss                PyTorch's loss: cross-entropy of the output flattened to [batch, rest]
                      (the loss placer attaches), averaged over the batch
  param:<name>:head   the first (up to) 8 values of each parameter, flattened: how the test finds
                      placer's parameter for PyTorch's (they are equal, whatever their names)
  grad:<name>:at      int64 positions (up to 2048, spread over the flattened gradient)
  grad:<name>:values  the gradient at those positions
  grad:<name>:norm    the gradient's L2 norm [1]
The reference step runs with dropout off (nn.Dropout and nn.MultiheadAttention modules in eval
mode, every other module in training mode); the test loads the model with OnnxOptions::dropout off
to match.
"""

INPUT_SIZE = 64
EXPORT_BATCH = 3
REFERENCE_BATCH = 2
CLASSES = 10
VOCAB = 50
SAMPLES = 2048


def _vision(builder, size=INPUT_SIZE, opset=13):
    return {
        "build": builder,
        "inputs": lambda torch, b: [("images", torch.randn(b, 3, size, size))],
        "classes": CLASSES,
        "opset": opset,
    }


def _tokens(builder, opset, names_and_lengths, classes):
    return {
        "build": builder,
        "inputs": lambda torch, b: [
            (name, torch.randint(0, VOCAB, (b, length))) for name, length in names_and_lengths
        ],
        "classes": classes,
        "opset": opset,
    }


def _sequence(builder, opset, channels, length):
    return {
        "build": builder,
        "inputs": lambda torch, b: [("sequence", torch.randn(b, channels, length))],
        "classes": CLASSES,
        "opset": opset,
    }


def _conv1d(torch, nn):
    class Conv1dNet(nn.Module):
        """1-D convolutions over a [batch, 4, 16] sequence as sequence models use them: a plain
        one with padding, a strided, dilated and grouped one, Mamba's depthwise causal one
        (padded by kernel - 1 on both sides, the tail cut), one with padding='same' of an even
        kernel (asymmetric), and a strided transposed one with output padding; mean over the
        sequence, a linear classifier."""

        def __init__(self):
            super().__init__()
            self.plain = nn.Conv1d(4, 8, 3, padding=1)
            self.strided = nn.Conv1d(8, 8, 3, stride=2, dilation=2, padding=2, groups=2)
            self.causal = nn.Conv1d(8, 8, 4, groups=8, padding=3)
            self.same = nn.Conv1d(8, 8, 4, padding="same", bias=False)
            self.up = nn.ConvTranspose1d(8, 6, 4, stride=2, padding=1, output_padding=1)
            self.head = nn.Linear(6, CLASSES)

        def forward(self, x):
            h = torch.relu(self.plain(x))
            h = torch.relu(self.strided(h))
            h = h + self.causal(h)[..., : h.shape[-1]]
            h = torch.tanh(self.same(h))
            return self.head(self.up(h).mean(dim=2))

    return Conv1dNet()


def _seq2seq(torch, nn):
    class Seq2Seq(nn.Module):
        """torch.nn.Transformer (encoder-decoder) over token embeddings, a causal target mask,
        mean over the target steps, a linear classifier."""

        def __init__(self):
            super().__init__()
            self.source_embed = nn.Embedding(VOCAB, 64)
            self.target_embed = nn.Embedding(VOCAB, 64)
            self.transformer = nn.Transformer(
                64, 4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128,
                dropout=0.1, batch_first=True)
            self.head = nn.Linear(64, CLASSES)

        def forward(self, source, target):
            steps = target.shape[1]
            mask = torch.triu(torch.full((steps, steps), float("-inf")), diagonal=1)
            y = self.transformer(self.source_embed(source), self.target_embed(target),
                                 tgt_mask=mask)
            return self.head(y.mean(dim=1))

    return Seq2Seq()


def _language_model(torch, nn, cell):
    class LanguageModel(nn.Module):
        """Token embedding, a 2-layer nn.LSTM or nn.GRU (batch first), the next token's logits
        from the last step."""

        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 32)
            self.rnn = (nn.LSTM if cell == "lstm" else nn.GRU)(32, 48, num_layers=2,
                                                                batch_first=True)
            self.head = nn.Linear(48, VOCAB)

        def forward(self, tokens):
            y, _ = self.rnn(self.embed(tokens))
            return self.head(y[:, -1])

    return LanguageModel()


def _t5(torch, nn):
    import transformers

    class T5(nn.Module):
        """transformers' T5ForConditionalGeneration from a small T5Config, random weights (nothing
        downloaded): 2 encoder and 2 decoder blocks, d_model 32, 2 heads, relative position
        buckets; the next token's logits from the decoder's last step. Dropout 0: T5's attention
        drops its weights with the functional dropout, which no module's eval mode turns off."""

        def __init__(self):
            super().__init__()
            config = transformers.T5Config(
                vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                num_decoder_layers=2, num_heads=2, relative_attention_num_buckets=8,
                relative_attention_max_distance=16, dropout_rate=0.0, decoder_start_token_id=0,
                pad_token_id=0)
            self.t5 = transformers.T5ForConditionalGeneration(config)

        def forward(self, source, target):
            out = self.t5(input_ids=source, decoder_input_ids=target, use_cache=False)
            return out.logits[:, -1]

    return T5()


def _tv(name, **kwargs):
    def build(torch, nn):
        import torchvision

        return getattr(torchvision.models, name)(weights=None, num_classes=CLASSES, **kwargs)

    return build


# Name -> how to build it, its inputs and the opset it is exported with (13 to 18 across the
# suite, so that every opset's form of an op is exercised).
SUITE = {
    "resnet18": _vision(_tv("resnet18")),
    "resnet50": _vision(_tv("resnet50")),
    "vgg11": _vision(_tv("vgg11"), size=224),
    "densenet121": _vision(_tv("densenet121")),
    "googlenet": _vision(_tv("googlenet", aux_logits=False, init_weights=True)),
    "inception_v3": _vision(_tv("inception_v3", aux_logits=False, init_weights=True), size=139),
    "mobilenet_v2": _vision(_tv("mobilenet_v2")),
    "mobilenet_v3_small": _vision(_tv("mobilenet_v3_small"), opset=14),
    "efficientnet_b0": _vision(_tv("efficientnet_b0", stochastic_depth_prob=0.0), opset=15),
    "shufflenet_v2_x1_0": _vision(_tv("shufflenet_v2_x1_0"), opset=16),
    "squeezenet1_1": _vision(_tv("squeezenet1_1")),
    "regnet_y_400mf": _vision(_tv("regnet_y_400mf"), opset=17),
    "convnext_tiny": _vision(_tv("convnext_tiny", stochastic_depth_prob=0.0), opset=17),
    "vit_b_16": _vision(_tv("vit_b_16", image_size=INPUT_SIZE), opset=18),
    "transformer_seq2seq": _tokens(_seq2seq, 14, [("source", 7), ("target", 5)], CLASSES),
    "lstm_lm": _tokens(lambda torch, nn: _language_model(torch, nn, "lstm"), 13,
                       [("tokens", 12)], VOCAB),
    "gru_lm": _tokens(lambda torch, nn: _language_model(torch, nn, "gru"), 18, [("tokens", 12)],
                      VOCAB),
}

# Exported and referenced as the suite's models are, but fixtures of scripts/export_onnx.py
# (tests/onnx_models_test.cc), not suite models: t5 needs transformers; conv1d is a test of the
# loader's 1-D convolutions rather than a model people train as it is.
FIXTURES = {
    "t5": _tokens(_t5, 17, [("source", 7), ("target", 5)], VOCAB),
    "conv1d": _sequence(_conv1d, 17, 4, 16),
}


def perturb(torch, nn, model):
    """Distinct values in every parameter and buffer; BatchNorm variances away from 1."""
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.is_floating_point():
                tensor.add_(0.05 * torch.randn_like(tensor))
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_var.uniform_(0.5, 1.5)


def export(name, path, torch, nn, dynamic=True, batch=EXPORT_BATCH):
    """Builds suite model `name`, exports it to `path` and returns (model, spec)."""
    import warnings

    spec = SUITE[name] if name in SUITE else FIXTURES[name]
    torch.manual_seed(0)
    model = spec["build"](torch, nn)
    perturb(torch, nn, model)
    model.train()
    inputs = spec["inputs"](torch, batch)
    names = [n for n, _ in inputs]
    axes = {n: {0: "batch"} for n in names + ["logits"]} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(t for _, t in inputs), path, dynamo=False,
                          opset_version=spec["opset"], training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=names, output_names=["logits"],
                          dynamic_axes=axes)
    return model, spec


def write_reference(model, spec, path, torch, nn, onnx, numpy_helper):
    """PyTorch's own training step of `model` on a fixed minibatch, as described above."""
    import numpy as np

    torch.manual_seed(1)
    inputs = spec["inputs"](torch, REFERENCE_BATCH)
    labels = torch.randint(0, spec["classes"], (REFERENCE_BATCH,))
    model.train()
    # Dropout off: the dropout modules, and attention's own dropout (nn.MultiheadAttention drops
    # its attention weights in training mode), in eval mode.
    for module in model.modules():
        if isinstance(module, (nn.modules.dropout._DropoutNd, nn.MultiheadAttention)):
            module.eval()
    model.zero_grad()
    out = model(*[t for _, t in inputs])
    loss = nn.functional.cross_entropy(out.reshape(REFERENCE_BATCH, -1), labels)
    loss.backward()
    tensors = [numpy_helper.from_array(t.numpy(), f"input:{n}") for n, t in inputs]
    tensors.append(numpy_helper.from_array(labels.numpy(), "labels"))
    tensors.append(numpy_helper.from_array(np.array(loss.item(), dtype=np.float32), "loss"))
    for name, param in model.named_parameters():
        flat = param.detach().reshape(-1).numpy()
        grad = param.grad.reshape(-1).numpy() if param.grad is not None else np.zeros_like(flat)
        at = np.unique(np.linspace(0, flat.size - 1, min(flat.size, SAMPLES)).astype(np.int64))
        tensors += [
            numpy_helper.from_array(flat[:8].copy(), f"param:{name}:head"),
            numpy_helper.from_array(at, f"grad:{name}:at"),
            numpy_helper.from_array(grad[at].astype(np.float32), f"grad:{name}:values"),
            numpy_helper.from_array(
                np.array([np.linalg.norm(grad.astype(np.float64))], dtype=np.float32),
                f"grad:{name}:norm"),
        ]
    graph = onnx.helper.make_graph([], "reference", [], [], initializer=tensors)
    onnx.save(onnx.helper.make_model(graph), path)
