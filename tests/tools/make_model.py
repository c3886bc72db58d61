#!/usr/bin/env python3
"""Generate synthetic Hugging Face safetensors models for the aprfs test suite.

Standalone on purpose: this is the independent reference writer, it must not share
code with the C++ parser under test (or with aprcheck.py).

Examples:
  make_model.py /tmp/m --preset tiny
  make_model.py /tmp/m --preset edge --layout single --unaligned --shuffle-data
  make_model.py /tmp/m --preset many-shards --shards 100
  make_model.py --hf-cache /tmp/hub --repo microsoft/phi-4 --preset phi4 --sparse

A JSON summary of what was written goes to stdout.
"""

import argparse
import array
import hashlib
import json
import os
import random
import statistics
import struct
import sys

# Bytes per element of the safetensors dtypes we generate.
DTYPE_SIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8,
}

# Declaration order of the Rust `safetensors::Dtype` enum (increasing alignment).
# The Rust writer sorts tensors by this rank, descending, then by name.
RUST_DTYPE_ORDER = [
    "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16", "BF16",
    "I32", "U32", "F32", "F64", "I64", "U64",
]
RUST_DTYPE_RANK = {name: i for i, name in enumerate(RUST_DTYPE_ORDER)}

FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
CHUNK = 8 << 20  # tensor bytes are generated and written in 8 MiB pieces


class Tensor:
    def __init__(self, name, dtype, shape):
        self.name = name
        self.dtype = dtype
        self.shape = list(shape)

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self):
        return self.numel * DTYPE_SIZE[self.dtype]


class Preset:
    """A model: tensors in state-dict (layer) order, config.json, tokenizer recipe."""

    def __init__(self, tensors, config, tokenizer, default_shards,
                 shard_pattern="model-%05d-of-%05d.safetensors", values="random-bits",
                 extra_files=None):
        self.tensors = tensors
        # Written with the tokenizer: file name -> a dict (as JSON) or bytes.
        self.extra_files = extra_files or {}
        self.config = config
        self.tokenizer = tokenizer  # dict of make_tokenizer() keyword arguments; None: no tokenizer.json
        self.default_shards = default_shards
        self.shard_pattern = shard_pattern  # % (k, n)
        self.values = values  # default --values: "random-bits" or "realistic"


# --------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------

def llama_tensors(hidden, inter, layers, heads, kv_heads, vocab, wdtype="BF16",
                  ndtype="F32", lm_head_dtype=None, tie=False):
    """Tensors of a LLaMA-style model in the order transformers registers them."""
    head_dim = hidden // heads
    kv = kv_heads * head_dim
    out = [Tensor("model.embed_tokens.weight", wdtype, [vocab, hidden])]
    for i in range(layers):
        p = "model.layers.%d." % i
        out += [
            Tensor(p + "self_attn.q_proj.weight", wdtype, [hidden, hidden]),
            Tensor(p + "self_attn.k_proj.weight", wdtype, [kv, hidden]),
            Tensor(p + "self_attn.v_proj.weight", wdtype, [kv, hidden]),
            Tensor(p + "self_attn.o_proj.weight", wdtype, [hidden, hidden]),
            Tensor(p + "mlp.gate_proj.weight", wdtype, [inter, hidden]),
            Tensor(p + "mlp.up_proj.weight", wdtype, [inter, hidden]),
            Tensor(p + "mlp.down_proj.weight", wdtype, [hidden, inter]),
            Tensor(p + "input_layernorm.weight", ndtype, [hidden]),
            Tensor(p + "post_attention_layernorm.weight", ndtype, [hidden]),
        ]
    out.append(Tensor("model.norm.weight", ndtype, [hidden]))
    if not tie:
        out.append(Tensor("lm_head.weight", lm_head_dtype or wdtype, [vocab, hidden]))
    return out


def llama_config(hidden, inter, layers, heads, kv_heads, vocab, tie, bos, eos):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 256,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.47.0",
        "use_cache": True,
        "vocab_size": vocab,
    }


def preset_tiny(tie, shards, wdtype="BF16"):
    # lm_head is F16 so that the tiny model covers F32, F16 and BF16.
    h, inter, layers, heads, kv, vocab = 64, 128, 2, 4, 2, 128
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype,
                            lm_head_dtype="F16", tie=tie)
    config = llama_config(h, inter, layers, heads, kv, vocab, tie, bos=vocab - 2, eos=vocab - 1)
    tok = dict(vocab_size=vocab, n_merges=32, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 2)


def preset_quant_tiny(tie, shards, wdtype="BF16"):
    """LLaMA-like, sized so every encoder path of the computed views is taken: rows shorter
    than 256 (H=128) and longer but not a multiple of 256 (I=288, Q4_K row padding), plus a
    linear-attention layer's tensors: the GDN keep-list (A_log, conv1d, dt_bias), a 1-D
    tensor of 1300 elements that matches no skip pattern and a 3-D fused-experts tensor (both
    quantized flat). Realistic values by default."""
    h, inter, layers, heads, kv, vocab = 128, 288, 2, 2, 1, 128
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=tie)
    la = "model.layers.1.linear_attn."
    extra = [Tensor(la + "A_log", "F32", [1024]),
             Tensor(la + "conv1d.weight", wdtype, [256, 1, 4]),
             Tensor(la + "dt_bias", "F32", [1024]),
             Tensor(la + "ssm_alpha", wdtype, [1300]),
             Tensor("model.layers.1.mlp.experts.gate_up_proj", wdtype, [2, 96, 100])]
    at = next(i for i, t in enumerate(tensors) if t.name.startswith("model.layers.1.mlp."))
    tensors[at:at] = extra
    config = llama_config(h, inter, layers, heads, kv, vocab, tie, bos=vocab - 2, eos=vocab - 1)
    tok = dict(vocab_size=vocab, n_merges=32, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 2, values="realistic")


def preset_many_shards(tie, shards, wdtype="BF16"):
    n = shards or 10
    # Enough layers that every shard gets at least a few tensors.
    h, inter, heads, kv, vocab = 32, 64, 4, 2, 64
    layers = max(2, (n + 3) // 4)
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=tie)
    config = llama_config(h, inter, layers, heads, kv, vocab, tie, bos=vocab - 2, eos=vocab - 1)
    tok = dict(vocab_size=vocab, n_merges=16, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 10)


def preset_edge(tie, shards):
    """Odd sizes, empty tensors, a scalar and awkward names."""
    tensors = [
        Tensor("model.embed_tokens.weight", "F32", [16, 8]),
        Tensor("edge.empty", "F32", [0]),
        Tensor("edge.empty_2d", "F16", [4, 0]),
        Tensor("edge.scalar", "F32", []),
        Tensor("edge.u8_3", "U8", [3]),
        Tensor("edge.i8_5", "I8", [5]),
        Tensor("edge.bool_7", "BOOL", [7]),
        Tensor("edge.f16_3", "F16", [3]),
        Tensor("edge.i32_1", "I32", [1]),
        Tensor("edge.i64_2", "I64", [2]),
        Tensor("edge.f64_1", "F64", [1]),
        Tensor("edge.bf16_3x3", "BF16", [3, 3]),
        # Byte-wise name order: 'Z' (0x5A) < 'b' (0x62) < 0xC3 (first byte of 'ü').
        Tensor("edge.Zupper", "F32", [2]),
        Tensor("edge.\u00fcnicode", "F32", [2]),
        Tensor("edge.long." + "x" * 190, "F32", [1]),
        Tensor("model.norm.weight", "F32", [8]),
    ]
    if not tie:
        tensors.append(Tensor("lm_head.weight", "F32", [16, 8]))
    config = llama_config(8, 16, 0, 2, 2, 16, tie, bos=14, eos=15)
    config["torch_dtype"] = "float32"
    tok = dict(vocab_size=16, n_merges=4, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 2)


def preset_phi4(tie, shards):
    """microsoft/phi-4: 40 layers, 243 BF16 tensors, 29,319,014,400 data bytes."""
    hidden, inter, layers, heads, kv_heads, vocab = 5120, 17920, 40, 40, 10, 100352
    head_dim = hidden // heads
    qkv = (heads + 2 * kv_heads) * head_dim  # 7680
    tensors = [Tensor("model.embed_tokens.weight", "BF16", [vocab, hidden])]
    for i in range(layers):
        p = "model.layers.%d." % i
        # Registration order of Phi3DecoderLayer: self_attn, mlp, then the two norms.
        tensors += [
            Tensor(p + "self_attn.o_proj.weight", "BF16", [hidden, hidden]),
            Tensor(p + "self_attn.qkv_proj.weight", "BF16", [qkv, hidden]),
            Tensor(p + "mlp.gate_up_proj.weight", "BF16", [2 * inter, hidden]),
            Tensor(p + "mlp.down_proj.weight", "BF16", [hidden, inter]),
            Tensor(p + "input_layernorm.weight", "BF16", [hidden]),
            Tensor(p + "post_attention_layernorm.weight", "BF16", [hidden]),
        ]
    tensors.append(Tensor("model.norm.weight", "BF16", [hidden]))
    if not tie:
        tensors.append(Tensor("lm_head.weight", "BF16", [vocab, hidden]))
    config = {
        "architectures": ["Phi3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 100257,
        "embd_pdrop": 0.0,
        "eos_token_id": 100265,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 16384,
        "model_type": "phi3",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "original_max_position_embeddings": 16384,
        "pad_token_id": 100349,
        "resid_pdrop": 0.0,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 250000,
        "sliding_window": None,
        "tie_word_embeddings": tie,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.47.0",
        "use_cache": True,
        "vocab_size": vocab,
    }
    # 256 byte tokens + 100000 merges + 96 specials = 100352, specials at 100256..100351.
    named = {1: "<|endoftext|>", 2: "<|fim_prefix|>", 3: "<|fim_middle|>", 4: "<|fim_suffix|>",
             8: "<|im_start|>", 9: "<|im_end|>", 10: "<|im_sep|>", 20: "<|endofprompt|>"}
    specials = [named.get(i, "<|dummy_%d|>" % i) for i in range(96)]
    # As phi-4's: tiktoken's cl100k split regex, merges not ignored, GPT2Tokenizer.
    tok = dict(vocab_size=vocab, n_merges=100000, specials=specials, split_regex=LLAMA3_REGEX)
    tokenizer_config = {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False,
                        "add_eos_token": False, "bos_token": "<|endoftext|>",
                        "eos_token": "<|im_end|>"}
    return Preset(tensors, config, tok, 6, extra_files={"tokenizer_config.json": tokenizer_config})


def preset_bench_1g(tie, shards, wdtype="BF16"):
    """A 1.08 GB llama-shaped BF16 model in 4 shards: big enough to measure downloads."""
    h, inter, layers, heads, kv, vocab = 2048, 5632, 8, 16, 16, 32000
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=tie)
    config = llama_config(h, inter, layers, heads, kv, vocab, tie, bos=1, eos=2)
    tok = dict(vocab_size=vocab, n_merges=vocab - 256 - 2, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 4)


def preset_bench_dense(tie, shards, layers=13, wdtype="BF16"):
    """Llama-2-7B shapes with `layers` layers (~0.79 GB + 0.40 GB per layer; 13 -> 6.05 GB):
    BF16 weights, F32 norms and an F32 lm_head, so the model mixes both dtypes."""
    h, inter, heads, kv, vocab = 4096, 11008, 32, 32, 32000
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype,
                            lm_head_dtype="F32", tie=tie)
    config = llama_config(h, inter, layers, heads, kv, vocab, tie, bos=1, eos=2)
    tok = dict(vocab_size=vocab, n_merges=vocab - 256 - 2, specials=["<s>", "</s>"])
    return Preset(tensors, config, tok, 5)


# deepseek-ai/DeepSeek-V3's dimensions.
DEEPSEEK_V3_DIMS = dict(hidden=7168, inter=18432, moe_inter=2048, vocab=129280, experts=256,
                        heads=128, q_lora=1536, kv_lora=512, nope=128, rope=64, v_dim=128,
                        dense_layers=3)


def deepseek_v3_tensors(layers, fp8, dims=DEEPSEEK_V3_DIMS, scale_dtype="F32", mtp=True):
    """deepseek-ai/DeepSeek-V3's tensors in registration order: FP8 (`fp8`) projections, each
    with a `weight_scale_inv` (`scale_dtype`) of 128x128 blocks, BF16 norms/embeddings/router,
    F32 router bias. The first `dense_layers` layers are dense, the others MoE (`experts`
    routed experts + 1 shared); with `mtp` the last layer is the multi-token-prediction layer
    with its own embedding and head."""
    d = dims
    hidden, inter, moe_inter, vocab, experts = (d["hidden"], d["inter"], d["moe_inter"],
                                                d["vocab"], d["experts"])
    heads, q_lora, kv_lora, nope, rope, v_dim = (d["heads"], d["q_lora"], d["kv_lora"],
                                                 d["nope"], d["rope"], d["v_dim"])
    dense_layers = d["dense_layers"]

    def quantized(name, rows, cols):
        scale = [-(-rows // 128), -(-cols // 128)]
        return [Tensor(name + ".weight", fp8, [rows, cols]),
                Tensor(name + ".weight_scale_inv", scale_dtype, scale)]

    def mlp(prefix, inter_size):
        return (quantized(prefix + "gate_proj", inter_size, hidden)
                + quantized(prefix + "up_proj", inter_size, hidden)
                + quantized(prefix + "down_proj", hidden, inter_size))

    out = [Tensor("model.embed_tokens.weight", "BF16", [vocab, hidden])]
    for i in range(layers):
        p = "model.layers.%d." % i
        a = p + "self_attn."
        out += quantized(a + "q_a_proj", q_lora, hidden)
        out.append(Tensor(a + "q_a_layernorm.weight", "BF16", [q_lora]))
        out += quantized(a + "q_b_proj", heads * (nope + rope), q_lora)
        out += quantized(a + "kv_a_proj_with_mqa", kv_lora + rope, hidden)
        out.append(Tensor(a + "kv_a_layernorm.weight", "BF16", [kv_lora]))
        out += quantized(a + "kv_b_proj", heads * (nope + v_dim), kv_lora)
        out += quantized(a + "o_proj", hidden, heads * v_dim)
        if i < min(dense_layers, layers - 1):
            out += mlp(p + "mlp.", inter)
        else:
            for e in range(experts):
                out += mlp(p + "mlp.experts.%d." % e, moe_inter)
            out.append(Tensor(p + "mlp.gate.weight", "BF16", [experts, hidden]))
            out.append(Tensor(p + "mlp.gate.e_score_correction_bias", "F32", [experts]))
            out += mlp(p + "mlp.shared_experts.", moe_inter)
        out.append(Tensor(p + "input_layernorm.weight", "BF16", [hidden]))
        out.append(Tensor(p + "post_attention_layernorm.weight", "BF16", [hidden]))
        if mtp and i == layers - 1:  # the multi-token-prediction layer
            out += [
                Tensor(p + "embed_tokens.weight", "BF16", [vocab, hidden]),
                Tensor(p + "enorm.weight", "BF16", [hidden]),
                Tensor(p + "hnorm.weight", "BF16", [hidden]),
                Tensor(p + "eh_proj.weight", "BF16", [hidden, 2 * hidden]),
                Tensor(p + "shared_head.norm.weight", "BF16", [hidden]),
                Tensor(p + "shared_head.head.weight", "BF16", [vocab, hidden]),
            ]
    out.append(Tensor("model.norm.weight", "BF16", [hidden]))
    out.append(Tensor("lm_head.weight", "BF16", [vocab, hidden]))
    return out


def preset_deepseek_v3(tie, shards, layers=62, fp8="F8_E4M3"):
    """deepseek-ai/DeepSeek-V3: 61 layers + the MTP layer, 91,991 tensors, ~688 GB in 163
    shards. Use --sparse. `fp8` replaces F8_E4M3 (e.g. U8, same byte size) for readers that
    have no FP8 code."""
    if layers < 2:
        raise ValueError("deepseek-v3 needs at least 2 layers (one dense or MoE, one MTP)")
    tensors = deepseek_v3_tensors(layers, fp8)
    config = deepseek_v3_config(layers)
    specials = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                "<\uff5c\u2581pad\u2581\uff5c>"]
    specials += ["<\uff5cplace\u2581holder\u2581no\u2581%d\uff5c>" % i for i in range(797)]
    tok = dict(vocab_size=129280, n_merges=129280 - 256 - len(specials), specials=specials)
    # The real repo spells the total with 6 digits: model-00001-of-000163.safetensors.
    return Preset(tensors, config, tok, 163, shard_pattern="model-%05d-of-%06d.safetensors")


def deepseek_v3_config(layers):
    """deepseek-ai/DeepSeek-V3's config.json for `layers` layers (the MTP layer included)."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "first_k_dense_replace": 3,
        "hidden_act": "silu",
        "hidden_size": 7168,
        "initializer_range": 0.02,
        "intermediate_size": 18432,
        "kv_lora_rank": 512,
        "max_position_embeddings": 163840,
        "model_type": "deepseek_v3",
        "moe_intermediate_size": 2048,
        "moe_layer_freq": 1,
        "n_group": 8,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 128,
        "num_experts_per_tok": 8,
        "num_hidden_layers": layers - 1,
        "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 1536,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
                                "quant_method": "fp8", "weight_block_size": [128, 128]},
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                         "type": "yarn"},
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 4,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.46.3",
        "use_cache": True,
        "v_head_dim": 128,
        "vocab_size": 129280,
    }


# fp8-tiny: DeepSeek-V3's structure at toy size. Every FP8 weight has partial 128x128 edge
# tiles in at least one dimension: [200, 130], [160, 200], [576, 130], [64, 512] (rows),
# [130, 32], [300, 130], [130, 300], [129, 130], [130, 129].
FP8_TINY_DIMS = dict(hidden=130, inter=300, moe_inter=129, vocab=160, experts=2, heads=2,
                     q_lora=200, kv_lora=512, nope=16, rope=64, v_dim=16, dense_layers=1)


def preset_fp8_tiny(tie, shards, fp8_scale="F32"):
    """A 2-layer DeepSeek-V3-like FP8 model (layer 0 dense, layer 1 MoE with 2 routed experts
    + 1 shared, no MTP layer): F8_E4M3 projections with `weight_scale_inv` companions
    (`fp8_scale`: F32, or F8_E8M0 for the ue8m0 variant), BF16 embeddings/norms/router, an F32
    router bias. Realistic values by default."""
    d = FP8_TINY_DIMS
    layers = 2
    tensors = deepseek_v3_tensors(layers, "F8_E4M3", dims=d, scale_dtype=fp8_scale, mtp=False)
    if tie:
        tensors = [t for t in tensors if t.name != "lm_head.weight"]
    config = deepseek_v3_config(layers + 1)  # + 1: the helper counts an MTP layer
    config.update({
        "bos_token_id": d["vocab"] - 2, "eos_token_id": d["vocab"] - 1,
        "first_k_dense_replace": d["dense_layers"], "hidden_size": d["hidden"],
        "intermediate_size": d["inter"], "kv_lora_rank": d["kv_lora"],
        "max_position_embeddings": 512, "moe_intermediate_size": d["moe_inter"], "n_group": 1,
        "n_routed_experts": d["experts"], "num_attention_heads": d["heads"],
        "num_experts_per_tok": 1, "num_key_value_heads": d["heads"],
        "num_nextn_predict_layers": 0, "q_lora_rank": d["q_lora"],
        "qk_nope_head_dim": d["nope"], "qk_rope_head_dim": d["rope"], "tie_word_embeddings": tie,
        "topk_group": 1, "v_head_dim": d["v_dim"], "vocab_size": d["vocab"],
    })
    specials = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"]
    tok = dict(vocab_size=d["vocab"], n_merges=32, specials=specials)
    return Preset(tensors, config, tok, 2, values="realistic")


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| "
                r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| "
               r"?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k (GPT-4o, Phi-4-mini): words split at case changes, contractions kept with them.
O200K_REGEX = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
               r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def preset_qwen2_tiny(tie, shards, wdtype="BF16"):
    """Qwen2-shaped, for the GGUF views: q/k/v biases, tied embeddings, a byte-level BPE
    tokenizer with every byte, Qwen2's pre-tokenizer, and config.vocab_size above the
    tokenizer's size (the converter pads with [PAD] tokens). Lively values: its logits show
    any wrong byte."""
    h, inter, layers, heads, kv, n_tokens, vocab = 64, 160, 2, 4, 2, 256 + 48 + 3, 320
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=True)
    for i in range(layers):
        p = "model.layers.%d.self_attn." % i
        at = next(j for j, t in enumerate(tensors) if t.name == p + "o_proj.weight")
        tensors[at:at] = [Tensor(p + "q_proj.bias", wdtype, [h]),
                          Tensor(p + "k_proj.bias", wdtype, [kv * h // heads]),
                          Tensor(p + "v_proj.bias", wdtype, [kv * h // heads])]
    config = llama_config(h, inter, layers, heads, kv, vocab, True, bos=n_tokens - 3,
                          eos=n_tokens - 2)
    config.update({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                   "max_position_embeddings": 512, "sliding_window": 512,
                   "use_sliding_window": False})
    tok = dict(vocab_size=n_tokens, n_merges=48,
               specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], split_regex=QWEN2_REGEX)
    return Preset(tensors, config, tok, 2, values="lively")


def preset_qwen3_tiny(tie, shards, wdtype="BF16"):
    """Qwen3-shaped, for the GGUF views: q/k RMS norms per head, a head size other than
    hidden / heads (config.json's head_dim), no biases, tied embeddings, Qwen2's tokenizer."""
    h, inter, layers, heads, kv, head_dim, n_tokens, vocab = 64, 160, 2, 4, 2, 32, 256 + 48 + 3, 320
    tensors = [Tensor("model.embed_tokens.weight", wdtype, [vocab, h])]
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors += [
            Tensor(p + "self_attn.q_proj.weight", wdtype, [heads * head_dim, h]),
            Tensor(p + "self_attn.k_proj.weight", wdtype, [kv * head_dim, h]),
            Tensor(p + "self_attn.v_proj.weight", wdtype, [kv * head_dim, h]),
            Tensor(p + "self_attn.o_proj.weight", wdtype, [h, heads * head_dim]),
            Tensor(p + "self_attn.q_norm.weight", wdtype, [head_dim]),
            Tensor(p + "self_attn.k_norm.weight", wdtype, [head_dim]),
            Tensor(p + "mlp.gate_proj.weight", wdtype, [inter, h]),
            Tensor(p + "mlp.up_proj.weight", wdtype, [inter, h]),
            Tensor(p + "mlp.down_proj.weight", wdtype, [h, inter]),
            Tensor(p + "input_layernorm.weight", wdtype, [h]),
            Tensor(p + "post_attention_layernorm.weight", wdtype, [h]),
        ]
    tensors.append(Tensor("model.norm.weight", wdtype, [h]))
    config = llama_config(h, inter, layers, heads, kv, vocab, True, bos=n_tokens - 3,
                          eos=n_tokens - 2)
    config.update({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                   "head_dim": head_dim, "max_position_embeddings": 512,
                   "rope_theta": 1000000.0, "sliding_window": None, "use_sliding_window": False})
    tok = dict(vocab_size=n_tokens, n_merges=48,
               specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], split_regex=QWEN2_REGEX)
    return Preset(tensors, config, tok, 2, values="lively")


def preset_llama3_tiny(tie, shards, wdtype="BF16", h=64, inter=160, layers=2):
    """Llama-3-shaped, for the GGUF views: grouped-query attention (the Q/K row permutation
    with different head counts), llama3 RoPE scaling (the generated rope_freqs tensor), an
    untied lm_head, Llama 3's pre-tokenizer with ignore_merges and a BOS template."""
    heads, kv, vocab = 4, 2, 256 + 48 + 2
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=False)
    config = llama_config(h, inter, layers, heads, kv, vocab, False, bos=vocab - 2, eos=vocab - 1)
    config.update({"max_position_embeddings": 1024, "rope_theta": 500000.0,
                   "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192,
                                    "rope_type": "llama3"}})
    tok = dict(vocab_size=vocab, n_merges=48, specials=["<|begin_of_text|>", "<|end_of_text|>"],
               split_regex=LLAMA3_REGEX, ignore_merges=True, bos_template="<|begin_of_text|>")
    return Preset(tensors, config, tok, 2, values="lively")


def phi3_preset(wdtype, tie, split_regex, config_update):
    """A tiny Phi3ForCausalLM for the GGUF views: fused qkv_proj and gate_up_proj (copied as
    they are), a GPT-2 style tokenizer that tokenizer_config.json names GPT2Tokenizer (as
    Phi-4's and Phi-4-mini's do); `config_update` sets the model's RoPE and context."""
    h, inter, layers, heads, kv = 64, 160, 2, 4, 2
    head_dim = h // heads
    n_tokens, vocab = 256 + 48 + 3, 320
    tensors = [Tensor("model.embed_tokens.weight", wdtype, [vocab, h])]
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors += [
            Tensor(p + "self_attn.o_proj.weight", wdtype, [h, h]),
            Tensor(p + "self_attn.qkv_proj.weight", wdtype, [(heads + 2 * kv) * head_dim, h]),
            Tensor(p + "mlp.gate_up_proj.weight", wdtype, [2 * inter, h]),
            Tensor(p + "mlp.down_proj.weight", wdtype, [h, inter]),
            Tensor(p + "input_layernorm.weight", wdtype, [h]),
            Tensor(p + "post_attention_layernorm.weight", wdtype, [h]),
        ]
    tensors.append(Tensor("model.norm.weight", wdtype, [h]))
    if not tie:
        tensors.append(Tensor("lm_head.weight", wdtype, [vocab, h]))
    config = {
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "rms_norm_eps": 1e-05, "tie_word_embeddings": tie,
        "vocab_size": vocab, "bos_token_id": n_tokens - 3, "eos_token_id": n_tokens - 2,
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    config.update(config_update)
    tok = dict(vocab_size=n_tokens, n_merges=48,
               specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], split_regex=split_regex)
    tokenizer_config = {"tokenizer_class": "GPT2Tokenizer", "add_bos_token": False,
                        "add_eos_token": False, "bos_token": "<|endoftext|>",
                        "eos_token": "<|endoftext|>"}
    return Preset(tensors, config, tok, 2, values="lively",
                  extra_files={"tokenizer_config.json": tokenizer_config})


def preset_phi4mini_tiny(tie, shards, wdtype="BF16"):
    """Phi-4-mini-shaped: a partial rotary factor of 0.75, long-context RoPE (longrope: short
    and long factors, an attention factor from 131072 / 4096 positions), tied embeddings, and
    o200k's pre-tokenizer (llama.cpp's "gpt-4o")."""
    rot = int(0.75 * 64) // 4  # 12 rotated dimensions per head
    rng = random.Random("phi4mini-factors")
    return phi3_preset(wdtype, True, O200K_REGEX, {
        "partial_rotary_factor": 0.75, "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope",
                         "long_factor": [round(1 + 3 * rng.random(), 4) for _ in range(rot // 2)],
                         "short_factor": [round(1 + rng.random(), 4) for _ in range(rot // 2)]},
        "sliding_window": 262144})


def preset_phi3_tiny(tie, shards, wdtype="BF16"):
    """Phi-4-shaped: no sliding window, an untied lm_head, cl100k's Split regex with merges not
    ignored (llama.cpp's "dbrx")."""
    return phi3_preset(wdtype, False, LLAMA3_REGEX, {
        "max_position_embeddings": 512, "original_max_position_embeddings": 512,
        "rope_theta": 250000, "rope_scaling": None, "sliding_window": None})


def preset_llama2_tiny(tie, shards, wdtype="BF16"):
    """Llama-2-shaped, for the GGUF views' SentencePiece path: plain RoPE, an untied lm_head,
    and a tokenizer.model (no tokenizer.json) with <unk>, <s>, </s>, the 256 byte pieces and
    "▁"-prefixed word pieces; tokenizer_config.json adds BOS and one added token."""
    h, inter, layers, heads, kv, vocab = 64, 160, 2, 4, 4, 320
    tensors = llama_tensors(h, inter, layers, heads, kv, vocab, wdtype=wdtype, tie=False)
    config = llama_config(h, inter, layers, heads, kv, vocab, False, bos=1, eos=2)
    tokenizer_config = {
        "tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "added_tokens_decoder": {"318": {"content": "<|im_end|>", "special": True}}}
    return Preset(tensors, config, None, 2, values="lively",
                  extra_files={"tokenizer.model": sentencepiece_model(),
                               "tokenizer_config.json": tokenizer_config})


def preset_gemma(arch, tie, shards, wdtype="BF16"):
    """Gemma 2 or 3 shaped, for the GGUF views: norms stored as w (the model applies 1 + w; the
    converter writes 1 + w), norms before and after the attention and the MLP, a head size
    other than hidden / heads, tied embeddings (Gemma 2's lm_head is dropped by the converter),
    Gemma 3's q/k norms and its local/global RoPE bases over 6 layers (the sixth global), and a
    SentencePiece tokenizer.model with Gemma's <pad> <eos> <bos> <unk> ids."""
    gemma3 = arch == "gemma3"
    h, inter, heads, kv, head_dim, vocab = 64, 160, 4, 2, 32, 320
    layers = 6 if gemma3 else 2
    tensors = [Tensor("model.embed_tokens.weight", wdtype, [vocab, h])]
    for i in range(layers):
        p = "model.layers.%d." % i
        tensors += [
            Tensor(p + "self_attn.q_proj.weight", wdtype, [heads * head_dim, h]),
            Tensor(p + "self_attn.k_proj.weight", wdtype, [kv * head_dim, h]),
            Tensor(p + "self_attn.v_proj.weight", wdtype, [kv * head_dim, h]),
            Tensor(p + "self_attn.o_proj.weight", wdtype, [h, heads * head_dim]),
        ]
        if gemma3:
            tensors += [Tensor(p + "self_attn.q_norm.weight", wdtype, [head_dim]),
                        Tensor(p + "self_attn.k_norm.weight", wdtype, [head_dim])]
        tensors += [
            Tensor(p + "mlp.gate_proj.weight", wdtype, [inter, h]),
            Tensor(p + "mlp.up_proj.weight", wdtype, [inter, h]),
            Tensor(p + "mlp.down_proj.weight", wdtype, [h, inter]),
            Tensor(p + "input_layernorm.weight", wdtype, [h]),
            Tensor(p + "post_attention_layernorm.weight", wdtype, [h]),
            Tensor(p + "pre_feedforward_layernorm.weight", wdtype, [h]),
            Tensor(p + "post_feedforward_layernorm.weight", wdtype, [h]),
        ]
    tensors.append(Tensor("model.norm.weight", wdtype, [h]))
    config = {
        "architectures": ["Gemma3ForCausalLM" if gemma3 else "Gemma2ForCausalLM"],
        "model_type": "gemma3_text" if gemma3 else "gemma2", "hidden_size": h,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": head_dim, "query_pre_attn_scalar": head_dim,
        "max_position_embeddings": 512, "rms_norm_eps": 1e-06, "sliding_window": 512,
        "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
        "vocab_size": vocab, "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "torch_dtype": "bfloat16",
    }
    if gemma3:
        config.update({"rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                       "sliding_window_pattern": 6, "final_logit_softcapping": None,
                       "attn_logit_softcapping": None, "rope_scaling": None})
    else:
        config.update({"rope_theta": 10000.0, "attn_logit_softcapping": 50.0,
                       "final_logit_softcapping": 30.0})
    tokenizer_config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>",
                        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                        "tokenizer_class": "GemmaTokenizer"}
    spm = sentencepiece_model(specials=(("<pad>", 3), ("<eos>", 3), ("<bos>", 3), ("<unk>", 2)))
    return Preset(tensors, config, None, 2, values="lively",
                  extra_files={"tokenizer.model": spm, "tokenizer_config.json": tokenizer_config})


# Presets whose layer count --layers may change.
LAYERED_PRESETS = ("bench-dense", "deepseek-v3")
# Presets whose projection/embedding dtype --weights-dtype may change.
WEIGHTS_DTYPE_PRESETS = ("tiny", "llama-tiny", "quant-tiny", "many-shards", "bench-1g",
                         "bench-dense")

PRESETS = {
    "bench-1g": preset_bench_1g,
    "bench-dense": preset_bench_dense,
    "deepseek-v3": preset_deepseek_v3,
    "fp8-tiny": preset_fp8_tiny,
    "tiny": lambda tie, shards, **kw: preset_tiny(tie, shards, **kw),
    "llama-tiny": lambda tie, shards, **kw: preset_tiny(True, shards, **kw),
    "quant-tiny": preset_quant_tiny,
    "edge": preset_edge,
    "phi4": preset_phi4,
    "many-shards": preset_many_shards,
    "qwen2-tiny": preset_qwen2_tiny,
    "qwen3-tiny": preset_qwen3_tiny,
    "llama3-tiny": preset_llama3_tiny,
    "phi3-tiny": preset_phi3_tiny,
    "phi4mini-tiny": preset_phi4mini_tiny,
    "llama2-tiny": preset_llama2_tiny,
    "gemma2-tiny": lambda tie, shards, **kw: preset_gemma("gemma2", tie, shards, **kw),
    "gemma3-tiny": lambda tie, shards, **kw: preset_gemma("gemma3", tie, shards, **kw),
    # Rows of whole 256-element super-blocks and 8 layers: the Q4_K_M view's K-quants and its
    # per-layer choices (use_more_bits), not only its block-size fallbacks.
    "llama3-kquant": lambda tie, shards, **kw: preset_llama3_tiny(tie, shards, h=256, inter=512,
                                                                  layers=8, **kw),
}


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

def byte_level_alphabet():
    """GPT-2 bytes_to_unicode(): 256 printable characters, one per byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def sentencepiece_model(specials=(("<unk>", 2), ("<s>", 3), ("</s>", 3))):
    """A SentencePiece ModelProto (tokenizer.model) written field by field: pieces {1: text,
    2: score, 3: type}: the specials (Llama's <unk> UNKNOWN, <s> and </s> CONTROL by default),
    <0x00>..<0xFF> (BYTE), then word pieces (NORMAL, scores falling with rank, one
    USER_DEFINED); a BPE trainer spec and a normalizer spec that adds the dummy prefix."""
    def varint(v):
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            out.append(b | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def field(number, wire, payload):
        key = varint(number << 3 | wire)
        return key + (varint(len(payload)) + payload if wire == 2 else payload)

    words = ["\u2581", "e", "l", "o", "t", "n", "s", "w", "r", "d", "i", "H", "N", "k", ",",
             "!", "'", "\u2581t", "he", "ll", "\u2581w", "or", "ld", "\u2581H", "ello",
             "\u2581Hello", "\u2581world", "\u2581it", "'s", "\u2581to", "ke", "ns",
             "\u2581tokens", "\u2581New", "\u2581l", "ine", "\u2581line", "\u258112", "34",
             "5", "\u2581the", "in", "er", "an", "\u2581a", "on", "re", "en", "at", "\u2581s",
             "es", "\u2581o", "ing", "<sep>"]
    pieces = [(text, 0.0, kind) for text, kind in specials]
    pieces += [("<0x%02X>" % b, 0.0, 6) for b in range(256)]
    pieces += [(w, -float(i), 4 if w == "<sep>" else 1) for i, w in enumerate(words)]
    proto = b""
    for text, score, kind in pieces:
        piece = field(1, 2, text.encode("utf-8")) + field(2, 5, struct.pack("<f", score))
        if kind != 1:  # NORMAL is protobuf's default: absent, as sentencepiece writes it
            piece += field(3, 0, varint(kind))
        proto += field(1, 2, piece)
    proto += field(2, 2, field(3, 0, varint(2)))                      # trainer_spec.model_type BPE
    proto += field(3, 2, field(1, 2, b"identity") + field(3, 0, varint(1)))  # add_dummy_prefix
    return proto


def make_tokenizer(vocab_size, n_merges, specials, seed, split_regex=None, ignore_merges=False,
                   bos_template=None):
    """A self-consistent synthetic byte-level BPE tokenizer.json (as a dict).

    ids: [0, base) byte tokens, then one token per merge, then the specials. `split_regex`:
    a Split pre-tokenizer before ByteLevel, as Llama 3 and Qwen2 have; `bos_template`: a
    TemplateProcessing post-processor that puts that token first (Llama 3).
    """
    base_n = vocab_size - n_merges - len(specials)
    if not 0 < base_n <= 256:
        raise ValueError("tokenizer: bad vocab/merges/specials split")
    tokens = byte_level_alphabet()[:base_n]
    known = set(tokens)
    rng = random.Random("tokenizer:%s" % seed)
    merges = []
    while len(merges) < n_merges:
        a = tokens[rng.randrange(len(tokens))]
        b = tokens[rng.randrange(len(tokens))]
        # Keep tokens short so the result looks like a real vocabulary.
        if len(a) + len(b) > 8 or (a + b) in known:
            continue
        tokens.append(a + b)
        known.add(a + b)
        merges.append(a + " " + b)
    first_special = len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    added = []
    for i, s in enumerate(specials):
        vocab[s] = first_special + i
        added.append({"id": first_special + i, "content": s, "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    pre = byte_level
    if split_regex is not None:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": "Isolated",
             "invert": False},
            dict(byte_level, use_regex=False)]}
    post = dict(byte_level, trim_offsets=False)
    if bos_template is not None:
        bos_id = vocab[bos_template]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos_template, "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos_template, "type_id": 0}},
                         {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": bos_template, "type_id": 1}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos_template: {"id": bos_template, "ids": [bos_id],
                                                  "tokens": [bos_template]}}}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": byte_level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": merges,
        },
    }


# --------------------------------------------------------------------------------------
# Tensor bytes
# --------------------------------------------------------------------------------------

# Clearing bit 6 of a float's most significant byte clears the top exponent bit, so
# every generated F16/BF16/F32/F64 value is finite with |x| < 2 (no NaN/Inf surprises).
CLEAR_TOP_EXP = bytes(b & ~0x40 for b in range(256))
BOOL_MASK = bytes(b & 1 for b in range(256))


def tensor_chunks(seed, tensor):
    """Deterministic pseudo-random bytes for (seed, tensor name), in CHUNK pieces."""
    key = hashlib.blake2b(("%s\0%s" % (seed, tensor.name)).encode(), digest_size=16).digest()
    rng = random.Random(int.from_bytes(key, "little"))
    size = DTYPE_SIZE[tensor.dtype]
    left = tensor.nbytes
    while left:
        n = min(CHUNK, left)  # CHUNK is a multiple of every element size
        buf = bytearray(rng.randbytes(n))
        if tensor.dtype in FLOAT_DTYPES:
            buf[size - 1::size] = buf[size - 1::size].translate(CLEAR_TOP_EXP)
        elif tensor.dtype == "BOOL":
            buf = bytearray(buf.translate(BOOL_MASK))
        yield bytes(buf)
        left -= n


# --------------------------------------------------------------------------------------
# Realistic values (--values realistic): what the computed views' encoders need to see
# --------------------------------------------------------------------------------------

def little_endian(arr):
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tobytes()


def encode_floats(values, dtype):
    """F32/F16/BF16/F64 bytes of Python floats (BF16 rounded to nearest even)."""
    if dtype == "F64":
        return little_endian(array.array("d", values))
    if dtype == "F16":
        return struct.pack("<%de" % len(values), *values)
    f32 = array.array("f", values)
    if dtype == "F32":
        return little_endian(f32)
    bits = array.array("I", f32.tobytes())
    bf16 = array.array("H", [(b + 0x7FFF + ((b >> 16) & 1)) >> 16 if (b & 0x7FFFFFFF) <= 0x7F800000
                             else (b >> 16) | 0x40 for b in bits])
    return little_endian(bf16)


def decode_floats(data, dtype):
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(data) // 2), data))
    if dtype == "BF16":
        wide = bytearray(2 * len(data))
        wide[2::4], wide[3::4] = data[0::2], data[1::2]
        data = bytes(wide)
    arr = array.array("d" if dtype == "F64" else "f")
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tolist()


def e4m3_value(code):
    """float8_e4m3fn: bias 7, no infinities, 0x7F/0xFF NaN."""
    e, m = (code >> 3) & 15, code & 7
    mag = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -mag if code & 0x80 else mag


def e4m3_code(v):
    """Nearest finite E4M3 code to v (never the NaN codes 0x7F/0xFF)."""
    best = min(range(0x7F), key=lambda c: (abs(e4m3_value(c) - abs(v)), c & 1))
    return best | (0x80 if v < 0 and best else 0)


# Uniform random bytes -> E4M3 codes of normally distributed values (sigma 150: typical
# |x| ~ 100, tails up to the 448 limit, as block-scaled DeepSeek weights), two buckets of zero.
_NORMAL = statistics.NormalDist(0.0, 150.0)
FP8_CODES = bytes(0 if b in (127, 128) else e4m3_code(_NORMAL.inv_cdf((b + 0.5) / 256))
                  for b in range(256))


def value_rng(seed, tensor):
    key = hashlib.blake2b(("realistic\0%s\0%s" % (seed, tensor.name)).encode(),
                          digest_size=16).digest()
    return random.Random(int.from_bytes(key, "little"))


def lively_floats(rng, tensor):
    """Values under which every part of a forward pass moves the logits: projections with
    sigma 0.25 (attention scores spread, so a wrong Q/K row order shows), embeddings and
    biases with sigma 1, norms near 1. For the GGUF views' logit checks."""
    n = tensor.numel
    if "norm" in tensor.name:
        return [1.0 + rng.gauss(0.0, 0.1) for _ in range(n)]
    sigma = 0.25 if "proj.weight" in tensor.name else 1.0
    return [rng.gauss(0.0, sigma) for _ in range(n)]


def realistic_floats(rng, tensor):
    """Norms near 1; otherwise small zero-mean weights (sigma 0.02) with the patterns the
    encoders treat specially: some 32-value blocks all positive (Q4_K clips them), some all
    zero, an all-zero 256-run, and scattered exact zeros."""
    n = tensor.numel
    if "norm" in tensor.name:
        return [1.0 + rng.gauss(0.0, 0.05) for _ in range(n)]
    vals = [rng.gauss(0.0, 0.02) for _ in range(n)]
    if n >= 256:
        for k in range(0, n, 32):
            r = rng.random()
            if r < 1 / 16:
                vals[k:k + 32] = [abs(v) for v in vals[k:k + 32]]
            elif r < 3 / 32:
                vals[k:k + 32] = [0.0] * len(vals[k:k + 32])
        for i in range(7, n, 53):
            vals[i] = 0.0
    if n >= 2048:
        vals[1024:1280] = [0.0] * 256
    return vals


def realistic_bytes(seed, tensor, lively=False):
    """The whole tensor, or None for dtypes that keep random bits (integers, BOOL)."""
    rng = value_rng(seed, tensor)
    if lively and tensor.dtype in FLOAT_DTYPES:
        return encode_floats(lively_floats(rng, tensor), tensor.dtype)
    if tensor.dtype == "F8_E4M3":
        return rng.randbytes(tensor.numel).translate(FP8_CODES)
    if tensor.name.endswith("_scale_inv"):
        # Block scales: positive and varied, so that |real weight| ~ 100 x scale ~ 0.01.
        if tensor.dtype in ("F8_E8M0", "U8"):
            return bytes(127 + rng.randint(-16, -11) for _ in range(tensor.numel))
        scales = [2e-5 * 20 ** rng.random() for _ in range(tensor.numel)]
        return encode_floats(scales, tensor.dtype)
    if tensor.dtype in FLOAT_DTYPES:
        return encode_floats(realistic_floats(rng, tensor), tensor.dtype)
    return None


# --------------------------------------------------------------------------------------
# Knobs: --poison, --zero-lm-head, --zero-tensor
# --------------------------------------------------------------------------------------

NAN_BITS = {"F32": "<I", "F16": "<H", "BF16": "<H", "F64": "<Q", "F8_E4M3": "<B",
            "F8_E8M0": "<B"}
POISON_BITS = {
    "nan": {"F32": 0x7FC00000, "F16": 0x7E00, "BF16": 0x7FC0, "F64": 0x7FF8000000000000,
            "F8_E4M3": 0x7F, "F8_E8M0": 0xFF},
    "inf": {"F32": 0x7F800000, "F16": 0x7C00, "BF16": 0x7F80, "F64": 0x7FF0000000000000},
}
MEAN_SHIFT = 150.0  # |mean| > 100 after the shift: weights are far smaller than 50


def knob_plan(args, tensors):
    """{tensor name: [transform]} from the knobs; a transform is ("zero",), ("set", bits)
    for the middle element, ("shift", x) or ("fill", bytes of one element)."""
    by_name = {t.name: t for t in tensors}
    plan = {}

    def need(name, what):
        if name not in by_name:
            raise ValueError("%s: the preset has no tensor %r" % (what, name))
        return by_name[name]

    for name in args.zero_tensor or []:
        need(name, "--zero-tensor")
        plan.setdefault(name, []).append(("zero",))
    if args.zero_lm_head:
        need("lm_head.weight", "--zero-lm-head (a tied model has none)")
        plan.setdefault("lm_head.weight", []).append(("zero",))
    for spec in args.poison or []:
        name, kind = spec.rsplit(":", 1)
        t = need(name, "--poison")
        if kind == "mean" and t.dtype == "F8_E4M3":
            # FP8: every code 128.0 (0x70) with all block scales 1.0 -> mean 128.
            scale = need(name + "_scale_inv", "--poison %s" % spec)
            one = (struct.pack("<f", 1.0) if scale.dtype == "F32" else b"\x7f")
            plan.setdefault(name, []).append(("fill", b"\x70"))
            plan.setdefault(scale.name, []).append(("fill", one))
        elif kind == "mean" and t.dtype in FLOAT_DTYPES:
            plan.setdefault(name, []).append(("shift", MEAN_SHIFT))
        elif kind in POISON_BITS and t.dtype in POISON_BITS[kind]:
            plan.setdefault(name, []).append(("set", POISON_BITS[kind][t.dtype]))
        else:
            hint = (" (FP8 has no Inf: poison its _scale_inv instead)"
                    if t.dtype == "F8_E4M3" else "")
            raise ValueError("--poison %s: a %s tensor cannot take %r%s"
                             % (spec, t.dtype, kind, hint))
    return plan


def apply_knobs(chunk, tensor, first, transforms):
    """Apply transforms to the chunk holding elements [first, first + len/size)."""
    size = DTYPE_SIZE[tensor.dtype]
    for op in transforms:
        if op[0] == "zero":
            chunk = bytes(len(chunk))
        elif op[0] == "fill":
            chunk = op[1] * (len(chunk) // size)
        elif op[0] == "shift":
            chunk = encode_floats([v + op[1] for v in decode_floats(chunk, tensor.dtype)],
                                  tensor.dtype)
        elif op[0] == "set":
            at = (tensor.numel // 2 - first) * size
            if 0 <= at < len(chunk):
                chunk = chunk[:at] + struct.pack(NAN_BITS[tensor.dtype], op[1]) + \
                    chunk[at + size:]
    return chunk


def tensor_data(args, tensor, knobs):
    """The tensor's bytes in CHUNK pieces: random bits or realistic values, then the knobs."""
    data = (realistic_bytes(args.seed, tensor, lively=args.values == "lively")
            if args.values in ("realistic", "lively") else None)
    if data is None:
        chunks = tensor_chunks(args.seed, tensor)
    else:
        chunks = (data[i:i + CHUNK] for i in range(0, len(data), CHUNK))
    first = 0
    for chunk in chunks:
        if tensor.name in knobs:
            chunk = apply_knobs(chunk, tensor, first, knobs[tensor.name])
        yield chunk
        first += len(chunk) // DTYPE_SIZE[tensor.dtype]


# --------------------------------------------------------------------------------------
# Sharding and ordering
# --------------------------------------------------------------------------------------

def split_balanced(tensors, n):
    """Split in state-dict order into exactly n non-empty groups of similar byte size."""
    if n < 1 or n > len(tensors):
        raise ValueError("cannot split %d tensors into %d shards" % (len(tensors), n))
    total = sum(t.nbytes for t in tensors)
    groups, i, done = [], 0, 0
    for k in range(n):
        shards_after = n - k - 1
        target = total * (k + 1) / n
        group = [tensors[i]]
        done += tensors[i].nbytes
        i += 1
        # Take the next tensor while its midpoint lies before this shard's target end,
        # always leaving one tensor for each remaining shard.
        while i < len(tensors) - shards_after and (
                shards_after == 0 or done + tensors[i].nbytes / 2 <= target):
            done += tensors[i].nbytes
            group.append(tensors[i])
            i += 1
        groups.append(group)
    return groups


def rust_writer_order(tensors):
    """Order of the Rust safetensors writer: dtype rank descending, then name bytes."""
    return sorted(tensors, key=lambda t: (-RUST_DTYPE_RANK[t.dtype], t.name.encode()))


def shuffled_orders(tensors, rng):
    """(header key order, data order) for --shuffle-data.

    The data order differs from name order and from header key order whenever the
    shard has at least three tensors (with two it differs from name order only).
    """
    by_name = sorted(tensors, key=lambda t: t.name.encode())
    header = tensors[:]
    rng.shuffle(header)
    data = tensors[:]
    for _ in range(1000):
        rng.shuffle(data)
        if len(data) < 2 or (data != by_name and (data != header or len(data) < 3)):
            break
    return header, data


# --------------------------------------------------------------------------------------
# Writing files
# --------------------------------------------------------------------------------------

def safetensors_header(header_order, offsets, unaligned):
    """The JSON header bytes, padded like the Rust writer or deliberately odd-sized."""
    obj = {"__metadata__": {"format": "pt"}}
    for t in header_order:
        obj[t.name] = {"dtype": t.dtype, "shape": t.shape, "data_offsets": list(offsets[t.name])}
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if unaligned:
        if len(text) % 2 == 0:
            text += b" "  # odd length => the data buffer starts at an odd file offset
    else:
        text += b" " * (-len(text) % 8)
    return text


class HashingWriter:
    """File writer that also computes the sha256 of everything written."""

    def __init__(self, path):
        self.f = open(path, "wb")
        self.sha = hashlib.sha256()

    def write(self, data):
        self.f.write(data)
        self.sha.update(data)

    def close(self):
        self.f.close()


def write_safetensors(path, tensors, args, rng, knobs):
    """Write one shard; returns the sha256 hex of its content (None when sparse)."""
    if args.shuffle_data:
        header_order, data_order = shuffled_orders(tensors, rng)
    else:
        header_order = data_order = rust_writer_order(tensors)
    offsets, pos = {}, 0
    for t in data_order:
        offsets[t.name] = (pos, pos + t.nbytes)
        pos += t.nbytes
    header = safetensors_header(header_order, offsets, args.unaligned)
    w = HashingWriter(path)
    try:
        w.write(struct.pack("<Q", len(header)))
        w.write(header)
        if args.sparse:
            # Sparse file: the data region is a hole of zeros that costs no disk.
            w.f.truncate(8 + len(header) + pos)
            return None
        for t in data_order:
            for chunk in tensor_data(args, t, knobs):
                w.write(chunk)
        return w.sha.hexdigest()
    finally:
        w.close()


def json_file_bytes(obj, sort_keys=True, indent=2):
    """JSON the way transformers saves config.json / index.json (indent 2, newline)."""
    return (json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
            + "\n").encode("utf-8")


def shard_file_names(n, layout, pattern):
    if layout == "single":
        return ["model.safetensors"]
    return [pattern % (k + 1, n) for k in range(n)]


class PlainTarget:
    """Writes files straight into a folder."""

    def __init__(self, out_dir):
        self.dir = os.path.abspath(out_dir)
        os.makedirs(self.dir, exist_ok=True)

    def write_bytes(self, name, data):
        with open(os.path.join(self.dir, name), "wb") as f:
            f.write(data)

    def write_shard(self, name, tensors, args, rng, knobs):
        write_safetensors(os.path.join(self.dir, name), tensors, args, rng, knobs)

    def finish(self):
        return {"dir": self.dir}


def is_commit_hash(text):
    return len(text) == 40 and all(c in "0123456789abcdef" for c in text)


class HfCacheTarget:
    """Writes blobs/, snapshots/<commit>/ (relative symlinks) and refs/<revision>."""

    def __init__(self, cache_dir, repo, revision, seed):
        parts = repo.split("/")
        if len(parts) != 2 or not all(parts) or any(x in (".", "..") for x in parts):
            raise ValueError("--repo must look like ORG/NAME")
        self.cache = os.path.abspath(cache_dir)
        self.repo = repo
        self.revision = revision
        self.seed = seed
        self.repo_dir = os.path.join(self.cache, "models--" + repo.replace("/", "--"))
        self.blobs = os.path.join(self.repo_dir, "blobs")
        os.makedirs(self.blobs, exist_ok=True)
        self.files = {}  # file name in the repo -> blob name

    def _store(self, tmp_path, blob):
        final = os.path.join(self.blobs, blob)
        if os.path.exists(final):
            os.unlink(tmp_path)  # identical content already cached
        else:
            os.replace(tmp_path, final)
        return blob

    def _tmp(self, name):
        return os.path.join(self.blobs, ".tmp-%d-%s" % (os.getpid(), name))

    def write_bytes(self, name, data):
        # Regular (non-LFS) files are named by their git blob sha1.
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        tmp = self._tmp(name)
        with open(tmp, "wb") as f:
            f.write(data)
        self.files[name] = self._store(tmp, blob)

    def write_shard(self, name, tensors, args, rng, knobs):
        tmp = self._tmp(name)
        sha = write_safetensors(tmp, tensors, args, rng, knobs)
        if sha is None:
            # Sparse: hashing 29 GB of zeros is pointless; use a name-derived sha256.
            sha = hashlib.sha256(("sparse\0%s\0%s\0%s" % (self.repo, name, self.seed))
                                 .encode()).hexdigest()
        self.files[name] = self._store(tmp, sha)

    def _commit(self):
        if is_commit_hash(self.revision):
            return self.revision
        # Content-addressed like a git commit: same files => same commit hash.
        listing = "".join("%s %s\n" % kv for kv in sorted(self.files.items()))
        return hashlib.sha1(("commit\0%s\0%s" % (self.repo, listing)).encode()).hexdigest()

    def finish(self):
        commit = self._commit()
        snap = os.path.join(self.repo_dir, "snapshots", commit)
        os.makedirs(snap, exist_ok=True)
        for name, blob in sorted(self.files.items()):
            link = os.path.join(snap, name)
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join("..", "..", "blobs", blob), link)
        if commit != self.revision:
            ref = os.path.join(self.repo_dir, "refs", self.revision)
            os.makedirs(os.path.dirname(ref), exist_ok=True)
            with open(ref + ".tmp", "w") as f:
                f.write(commit)  # no trailing newline: huggingface_hub does not strip it
            os.replace(ref + ".tmp", ref)
        return {"dir": snap, "cache_dir": self.cache, "repo_dir": self.repo_dir,
                "commit": commit, "revision": self.revision}


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Generate a synthetic safetensors model (plain folder or HF cache).")
    p.add_argument("out_dir", nargs="?", metavar="OUT_DIR",
                   help="output folder (or the cache root when --hf-cache has no value)")
    p.add_argument("--preset", required=True, choices=sorted(PRESETS))
    p.add_argument("--shards", type=int, default=None,
                   help="number of shard files (default per preset; ignored for --layout single)")
    p.add_argument("--layout", choices=["index", "single", "noindex"], default="index",
                   help="index: shards + model.safetensors.index.json; single: one "
                        "model.safetensors; noindex: several shards, no index")
    p.add_argument("--unaligned", action="store_true",
                   help="odd-length, unpadded JSON header: data buffer starts unaligned")
    p.add_argument("--shuffle-data", action="store_true",
                   help="random data order inside shards, unrelated to name/header order")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sparse", action="store_true",
                   help="do not write tensor data; extend files with truncate (all zeros)")
    p.add_argument("--hf-cache", nargs="?", const=True, default=None, metavar="CACHE_DIR",
                   help="write the HF cache layout under CACHE_DIR (needs --repo)")
    p.add_argument("--repo", help="ORG/NAME for --hf-cache")
    p.add_argument("--revision", default="main", help="ref name (or 40-hex commit)")
    p.add_argument("--no-tokenizer", action="store_true")
    p.add_argument("--no-config", action="store_true")
    p.add_argument("--tie-embeddings", action="store_true",
                   help="tie_word_embeddings=true and no lm_head.weight")
    p.add_argument("--layers", type=int, default=None,
                   help="number of layers (%s only)" % ", ".join(LAYERED_PRESETS))
    p.add_argument("--fp8-dtype", default=None, choices=["F8_E4M3", "U8", "I8"],
                   help="dtype of the FP8 weights (deepseek-v3 only; default F8_E4M3)")
    p.add_argument("--fp8-scale-dtype", default=None, choices=["F32", "F8_E8M0"],
                   help="dtype of the weight_scale_inv tensors (fp8-tiny only; default F32; "
                        "F8_E8M0 = the ue8m0 variant, scale 2^(byte-127))")
    p.add_argument("--weights-dtype", default=None, choices=["BF16", "F16", "F32"],
                   help="dtype of the projection and embedding weights (%s; default BF16)"
                        % ", ".join(WEIGHTS_DTYPE_PRESETS))
    p.add_argument("--values", default=None, choices=["random-bits", "realistic", "lively"],
                   help="tensor values: random bit patterns (default of the older presets) or "
                        "realistic weights (default of quant-tiny and fp8-tiny)")
    p.add_argument("--poison", action="append", metavar="NAME:nan|inf|mean",
                   help="put a NaN or an Inf in the middle of tensor NAME, or shift it so that "
                        "|mean| > 100 (repeatable)")
    p.add_argument("--zero-lm-head", action="store_true", help="lm_head.weight all zeros")
    p.add_argument("--zero-tensor", action="append", metavar="NAME",
                   help="tensor NAME all zeros (repeatable)")
    args = p.parse_args(argv)
    if args.layers is not None and args.preset not in LAYERED_PRESETS:
        p.error("--layers applies to %s only" % ", ".join(LAYERED_PRESETS))
    if args.layers is not None and args.layers < 1:
        p.error("--layers must be >= 1")
    if args.fp8_dtype is not None and args.preset != "deepseek-v3":
        p.error("--fp8-dtype applies to deepseek-v3 only")
    if args.fp8_scale_dtype is not None and args.preset != "fp8-tiny":
        p.error("--fp8-scale-dtype applies to fp8-tiny only")
    if args.weights_dtype is not None and args.preset not in WEIGHTS_DTYPE_PRESETS:
        p.error("--weights-dtype applies to %s only" % ", ".join(WEIGHTS_DTYPE_PRESETS))
    for spec in args.poison or []:
        if ":" not in spec or spec.rsplit(":", 1)[1] not in ("nan", "inf", "mean"):
            p.error("--poison takes NAME:nan, NAME:inf or NAME:mean, not %r" % spec)
    if args.sparse and (args.poison or args.zero_lm_head or args.zero_tensor
                        or args.values in ("realistic", "lively")):
        p.error("--sparse writes no data: it excludes --poison, --zero-*, --values realistic")
    if args.hf_cache is True:
        if not args.out_dir:
            p.error("--hf-cache without a value needs OUT_DIR as the cache root")
        args.hf_cache, args.out_dir = args.out_dir, None
    elif args.hf_cache is not None and args.out_dir:
        p.error("give either OUT_DIR or --hf-cache CACHE_DIR, not both")
    if args.hf_cache is None and not args.out_dir:
        p.error("OUT_DIR is required (or --hf-cache CACHE_DIR)")
    if args.hf_cache is not None and not args.repo:
        p.error("--hf-cache needs --repo ORG/NAME")
    if args.shards is not None and not 1 <= args.shards <= 100000:
        p.error("--shards must be >= 1")
    return args


def generate(args):
    extra = {}
    if args.layers is not None:
        extra["layers"] = args.layers
    if args.fp8_dtype is not None:
        extra["fp8"] = args.fp8_dtype
    if args.fp8_scale_dtype is not None:
        extra["fp8_scale"] = args.fp8_scale_dtype
    if args.weights_dtype is not None:
        extra["wdtype"] = args.weights_dtype
    preset = PRESETS[args.preset](args.tie_embeddings, args.shards, **extra)
    if args.values is None:
        args.values = preset.values
    knobs = knob_plan(args, preset.tensors)
    if args.layout == "single":
        n = 1
    else:
        n = args.shards or preset.default_shards
        if args.layout == "noindex" and args.shards is None:
            n = max(n, 2)
    groups = split_balanced(preset.tensors, n)
    names = shard_file_names(n, args.layout, preset.shard_pattern)

    if args.hf_cache is not None:
        target = HfCacheTarget(args.hf_cache, args.repo, args.revision, args.seed)
    else:
        target = PlainTarget(args.out_dir)

    rng = random.Random("order:%s" % args.seed)
    weight_map = {}
    for name, group in zip(names, groups):
        target.write_shard(name, group, args, rng, knobs)
        for t in group:
            weight_map[t.name] = name
    files = list(names)
    data_bytes = sum(t.nbytes for t in preset.tensors)

    if args.layout == "index":
        index = {"metadata": {"total_size": data_bytes}, "weight_map": weight_map}
        target.write_bytes("model.safetensors.index.json", json_file_bytes(index))
        files.append("model.safetensors.index.json")
    if not args.no_config:
        target.write_bytes("config.json", json_file_bytes(preset.config))
        files.append("config.json")
    if not args.no_tokenizer:
        if preset.tokenizer is not None:
            tok = make_tokenizer(seed=args.seed, **preset.tokenizer)
            target.write_bytes("tokenizer.json", json_file_bytes(tok, sort_keys=False))
            files.append("tokenizer.json")
        for name, content in sorted(preset.extra_files.items()):
            target.write_bytes(name, content if isinstance(content, bytes) else json_file_bytes(content))
            files.append(name)

    summary = target.finish()
    summary.update({
        "files": sorted(files),
        "tensors": len(preset.tensors),
        "data_bytes": data_bytes,
        "preset": args.preset,
        "layout": args.layout,
        "shards": n,
    })
    return summary


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        summary = generate(args)
    except (ValueError, OSError) as e:
        print("make_model: error: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
