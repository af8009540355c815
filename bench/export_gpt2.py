#!/usr/bin/env python3
"""A small GPT-2 from transformers (4 layers, width 256, 8 heads, vocabulary 1,000; random
weights, nothing downloaded), exported to ONNX in training mode with a dynamic batch: the logits
of the next token, as bench/model_sweep.py wraps decoders; sequences of 64 tokens. Its attention
is GPT-2's fused query-key-value projection (`c_attn`), which tensor parallelism splits by heads.

    source scripts/lib.sh && "$(placer_python)" bench/export_gpt2.py /tmp/gpt2/gpt2.onnx
"""

import sys

import torch
import transformers

from export_decoder import export_next_token

SEQUENCE = 64


def main(path):
    config = transformers.GPT2Config(vocab_size=1000, n_positions=128, n_embd=256, n_layer=4,
                                     n_head=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     bos_token_id=0, eos_token_id=0)
    # The exporter cannot export the SDPA path's mask construction (aten::diff).
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)

    export_next_token(model, path, SEQUENCE, 1000)


if __name__ == "__main__":
    main(sys.argv[1])
