#!/usr/bin/env python3
"""Reference forward pass of a small LLaMA-family, Qwen2/Qwen3, Phi-3 or Gemma 2/3 safetensors model, in plain
Python (no numpy, no torch), for the GGUF view tests: the logits llama.cpp computes from a
mounted .gguf must match these, computed from the shards as transformers defines the model
(rotate-half RoPE on the unpermuted Q/K weights, llama3 frequency scaling, grouped-query
attention, SwiGLU, RMSNorm, q/k/v biases, Qwen3's q/k norms, Phi-3's fused projections, tied
embeddings).

Written from the model definitions, sharing no code with aprfs. Slow: for models of a few
hundred thousand parameters only.

Usage: reference_forward.py MODEL_DIR TOKEN_ID... > {"logits": [[...], ...]} (one row per token)
"""
import json
import math
import os
import struct
import sys


def read_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))
    tensors = {}
    for shard in shards:
        with open(os.path.join(model_dir, shard), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            data = f.read()
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            raw = data[begin:end]
            dtype = entry["dtype"]
            if dtype == "F32":
                values = list(struct.unpack("<%df" % (len(raw) // 4), raw))
            elif dtype == "F16":
                values = list(struct.unpack("<%de" % (len(raw) // 2), raw))
            elif dtype == "BF16":
                halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
                values = list(struct.unpack("<%df" % len(halves),
                                            struct.pack("<%dI" % len(halves), *(h << 16 for h in halves))))
            else:
                raise SystemExit("reference_forward.py: %s is %s" % (name, dtype))
            tensors[name] = (entry["shape"], values)
    return tensors


def rows(tensor):
    shape, values = tensor
    cols = shape[-1]
    return [values[r * cols:(r + 1) * cols] for r in range(len(values) // cols)]


def matvec(matrix_rows, x, bias=None):
    out = [sum(w * v for w, v in zip(row, x)) for row in matrix_rows]
    if bias is not None:
        out = [o + b for o, b in zip(out, bias)]
    return out


def rms_norm(x, weight, eps):
    scale = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * scale * w for v, w in zip(x, weight)]


def inv_frequencies(config, head_dim):
    theta = config.get("rope_theta", 10000.0)
    inv = [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]
    scaling = config.get("rope_scaling") or {}
    if (scaling.get("rope_type") or scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        scaled = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < old / high:
                scaled.append(f)
            elif wavelen > old / low:
                scaled.append(f / factor)
            else:
                smooth = (old / wavelen - low) / (high - low)
                scaled.append((1 - smooth) * f / factor + smooth * f)
        inv = scaled
    return inv


def phi3_rope(config, head_dim):
    """Phi-3's rotary embedding: the rotated dimensions (partial_rotary_factor of the head), and
    for longrope the short factors (prompts shorter than original_max_position_embeddings)
    dividing the frequencies, cos and sin scaled by the attention factor. Returns (inverse
    frequencies, cos/sin scale)."""
    dim = int(head_dim * config.get("partial_rotary_factor", 1.0))
    theta = config.get("rope_theta", 10000.0)
    inv = [1.0 / theta ** (2 * i / dim) for i in range(dim // 2)]
    scaling = config.get("rope_scaling") or {}
    if (scaling.get("rope_type") or scaling.get("type")) not in ("longrope", "su"):
        return inv, 1.0
    inv = [f / s for f, s in zip(inv, scaling["short_factor"])]
    scale = config["max_position_embeddings"] / config["original_max_position_embeddings"]
    mscale = math.sqrt(1 + math.log(scale) / math.log(config["original_max_position_embeddings"])) \
        if scale > 1 else 1.0
    return inv, mscale


def rope(x, position, inv, mscale=1.0):
    """Rotate-half RoPE on the first 2 * len(inv) dimensions; the rest pass through."""
    half = len(inv)
    out = list(x)
    for i in range(half):
        angle = position * inv[i]
        c, s = math.cos(angle) * mscale, math.sin(angle) * mscale
        a, b = x[i], x[i + half]
        out[i] = a * c - b * s
        out[i + half] = b * c + a * s
    return out


def attention(queries, keys, values, scale, cap=None):
    """Causal grouped-query attention: per position, every query head over the keys and values
    of its KV head up to that position; scores times `scale`, soft-capped by `cap` if given.
    Returns the heads' outputs concatenated, per position."""
    heads, kv_heads = len(queries[0]), len(keys[0])
    head_dim = len(values[0][0])
    group = heads // kv_heads
    out_rows = []
    for pos in range(len(queries)):
        attended = []
        for hd in range(heads):
            kvh = hd // group
            scores = [sum(a * b for a, b in zip(queries[pos][hd], keys[j][kvh])) * scale
                      for j in range(pos + 1)]
            if cap:
                scores = [math.tanh(s / cap) * cap for s in scores]
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
            total = sum(weights)
            out = [0.0] * head_dim
            for j, w in enumerate(weights):
                for d in range(head_dim):
                    out[d] += w / total * values[j][kvh][d]
            attended += out
        out_rows.append(attended)
    return out_rows


def gelu_tanh(x):
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def gemma_forward(config, t, tokens):
    """Gemma 2 / Gemma 3 (transformers' modeling_gemma2/3): embeddings times sqrt(hidden),
    RMSNorm as x * (1 + w), norms before and after the attention and the MLP, GELU (tanh)
    gating, queries scaled by query_pre_attn_scalar^-0.5; Gemma 2's attention and final logit
    soft-capping; Gemma 3's q/k norms and RoPE base per layer (rope_local_base_freq on sliding
    layers, rope_theta on every sliding_window_pattern-th). Prompts are shorter than the
    sliding window, so no mask beyond the causal one."""
    gemma3 = config["architectures"][0].startswith("Gemma3")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv_heads, head_dim = config.get("num_key_value_heads", heads), config["head_dim"]
    eps = config.get("rms_norm_eps", 1e-6)
    scale = config.get("query_pre_attn_scalar", head_dim) ** -0.5
    attn_cap = config.get("attn_logit_softcapping")
    final_cap = config.get("final_logit_softcapping")
    pattern = config.get("sliding_window_pattern", 6)

    def norm(x, name):
        return rms_norm(x, [1.0 + w for w in t[name][1]], eps)

    embed = rows(t["model.embed_tokens.weight"])
    xs = [[v * math.sqrt(hidden) for v in embed[tok]] for tok in tokens]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        if gemma3:
            glob = (layer + 1) % pattern == 0
            theta = config.get("rope_theta", 1e6) if glob else config.get("rope_local_base_freq", 1e4)
        else:
            theta = config.get("rope_theta", 1e4)
        inv = [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]
        wq, wk, wv = (rows(t[p + "self_attn.%s_proj.weight" % n]) for n in "qkv")
        wo = rows(t[p + "self_attn.o_proj.weight"])
        queries, keys, values = [], [], []
        for pos, x in enumerate(xs):
            h = norm(x, p + "input_layernorm.weight")
            q, k, v = matvec(wq, h), matvec(wk, h), matvec(wv, h)
            qh = [q[i * head_dim:(i + 1) * head_dim] for i in range(heads)]
            kh = [k[i * head_dim:(i + 1) * head_dim] for i in range(kv_heads)]
            if gemma3:
                qh = [norm(x_, p + "self_attn.q_norm.weight") for x_ in qh]
                kh = [norm(x_, p + "self_attn.k_norm.weight") for x_ in kh]
            queries.append([rope(x_, pos, inv) for x_ in qh])
            keys.append([rope(x_, pos, inv) for x_ in kh])
            values.append([v[i * head_dim:(i + 1) * head_dim] for i in range(kv_heads)])
        for pos, attended in enumerate(attention(queries, keys, values, scale, attn_cap)):
            a = norm(matvec(wo, attended), p + "post_attention_layernorm.weight")
            xs[pos] = [x_ + y for x_, y in zip(xs[pos], a)]
        wg, wu, wd = (rows(t[p + "mlp.%s_proj.weight" % n]) for n in ("gate", "up", "down"))
        for pos in range(len(xs)):
            h = norm(xs[pos], p + "pre_feedforward_layernorm.weight")
            act = [gelu_tanh(g) * u for g, u in zip(matvec(wg, h), matvec(wu, h))]
            m = norm(matvec(wd, act), p + "post_feedforward_layernorm.weight")
            xs[pos] = [x_ + y for x_, y in zip(xs[pos], m)]
    logits = [matvec(embed, norm(x, "model.norm.weight")) for x in xs]
    if final_cap:
        logits = [[math.tanh(v / final_cap) * final_cap for v in row] for row in logits]
    return logits


def main():
    model_dir = sys.argv[1]
    tokens = [int(t) for t in sys.argv[2:]]
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    t = read_tensors(model_dir)
    if config["architectures"][0].startswith("Gemma"):
        json.dump({"logits": gemma_forward(config, t, tokens)}, sys.stdout)
        return
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or hidden // heads
    eps = config.get("rms_norm_eps", 1e-6)
    mscale = 1.0
    if config["architectures"][0] == "Phi3ForCausalLM":
        inv, mscale = phi3_rope(config, head_dim)
    else:
        inv = inv_frequencies(config, head_dim)
    embed = rows(t["model.embed_tokens.weight"])
    head = rows(t["lm_head.weight"]) if "lm_head.weight" in t else embed

    def get(name):
        return t[name][1] if name in t else None

    xs = [list(embed[tok]) for tok in tokens]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        if p + "self_attn.qkv_proj.weight" in t:  # Phi-3: Q, K, V rows in one matrix
            qkv = rows(t[p + "self_attn.qkv_proj.weight"])
            wq, wk, wv = (qkv[:heads * head_dim], qkv[heads * head_dim:(heads + kv_heads) * head_dim],
                          qkv[(heads + kv_heads) * head_dim:])
        else:
            wq, wk, wv = rows(t[p + "self_attn.q_proj.weight"]), rows(t[p + "self_attn.k_proj.weight"]), rows(t[p + "self_attn.v_proj.weight"])
        wo = rows(t[p + "self_attn.o_proj.weight"])
        keys, values, queries = [], [], []
        normed = [rms_norm(x, get(p + "input_layernorm.weight"), eps) for x in xs]
        for pos, h in enumerate(normed):
            q = matvec(wq, h, get(p + "self_attn.q_proj.bias"))
            k = matvec(wk, h, get(p + "self_attn.k_proj.bias"))
            v = matvec(wv, h, get(p + "self_attn.v_proj.bias"))
            qh = [q[i * head_dim:(i + 1) * head_dim] for i in range(heads)]
            kh = [k[i * head_dim:(i + 1) * head_dim] for i in range(kv_heads)]
            if p + "self_attn.q_norm.weight" in t:
                qh = [rms_norm(x, get(p + "self_attn.q_norm.weight"), eps) for x in qh]
                kh = [rms_norm(x, get(p + "self_attn.k_norm.weight"), eps) for x in kh]
            queries.append([rope(x, pos, inv, mscale) for x in qh])
            keys.append([rope(x, pos, inv, mscale) for x in kh])
            values.append([v[i * head_dim:(i + 1) * head_dim] for i in range(kv_heads)])
        for pos, attended in enumerate(attention(queries, keys, values, 1 / math.sqrt(head_dim))):
            xs[pos] = [a + b for a, b in zip(xs[pos], matvec(wo, attended))]
        if p + "mlp.gate_up_proj.weight" in t:  # Phi-3: gate rows, then up rows (chunk(2))
            gate_up = rows(t[p + "mlp.gate_up_proj.weight"])
            wg, wu = gate_up[:len(gate_up) // 2], gate_up[len(gate_up) // 2:]
        else:
            wg, wu = rows(t[p + "mlp.gate_proj.weight"]), rows(t[p + "mlp.up_proj.weight"])
        wd = rows(t[p + "mlp.down_proj.weight"])
        for pos in range(len(xs)):
            h = rms_norm(xs[pos], get(p + "post_attention_layernorm.weight"), eps)
            gate, up = matvec(wg, h), matvec(wu, h)
            act = [g / (1 + math.exp(-g)) * u for g, u in zip(gate, up)]
            xs[pos] = [a + b for a, b in zip(xs[pos], matvec(wd, act))]
    logits = [matvec(head, rms_norm(x, get("model.norm.weight"), eps)) for x in xs]
    json.dump({"logits": logits}, sys.stdout)


if __name__ == "__main__":
    main()
