#!/usr/bin/env python3
"""OPT-350m's configuration from transformers (random weights, nothing downloaded), exported to
ONNX in training mode with a dynamic batch, for issue 29's GPT-style target: the logits of the
next token, as bench/model_sweep.py wraps decoders; sequences of 128 tokens.

    source scripts/lib.sh && "$(placer_python)" bench/export_opt350m.py /tmp/opt/opt350m.onnx

(25 s and a 1.3 GB file on the development VM.)
"""

import sys

import torch
import transformers

from export_decoder import export_next_token

SEQUENCE = 128


def main(path):
    config = transformers.OPTConfig(vocab_size=50272, hidden_size=1024, num_hidden_layers=24,
                                    ffn_dim=4096, num_attention_heads=16, word_embed_proj_dim=512,
                                    max_position_embeddings=2048, do_layer_norm_before=False,
                                    dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = transformers.OPTForCausalLM(config)

    export_next_token(model, path, SEQUENCE, 1000)


if __name__ == "__main__":
    main(sys.argv[1])
