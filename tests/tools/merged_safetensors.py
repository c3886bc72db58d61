#!/usr/bin/env python3
"""Independent reference for aprfs's NAME.safetensors view: the shards of a model folder merged
into one safetensors file, written from the format's rules (docs: gguf-view.md section 6), with
no code shared with aprfs.

Layout: u64 LE header length N, the header (compact JSON, "__metadata__" first, padded with
spaces to a multiple of 8), then every tensor's bytes back to back. Tensors are ordered as the
official writer orders a state dict: element size descending, then name. The metadata is the
shards' own when every shard has the same, else {"format": "pt"}; "format" defaults to "pt".

Usage: merged_safetensors.py MODEL_DIR -o OUT
"""
import argparse
import json
import os
import struct
import sys

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
        "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64,
        "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}


def shard_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    if os.path.exists(os.path.join(model_dir, "model.safetensors")):
        return ["model.safetensors"]
    return sorted(n for n in os.listdir(model_dir) if n.endswith(".safetensors"))


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return 8 + n, json.loads(f.read(n).decode("utf-8"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()

    tensors = []  # (name, entry, shard path, absolute begin, size)
    metadatas = []
    for shard in shard_files(args.model_dir):
        path = os.path.join(args.model_dir, shard)
        data_start, header = read_header(path)
        metadatas.append(header.pop("__metadata__", {}))
        for name, entry in header.items():
            begin, end = entry["data_offsets"]
            tensors.append((name, entry, path, data_start + begin, end - begin))
    metadata = dict(metadatas[0]) if metadatas and all(m == metadatas[0] for m in metadatas) else {}
    metadata.setdefault("format", "pt")

    tensors.sort(key=lambda t: (-BITS[t[1]["dtype"]], t[0].encode("utf-8")))
    out_header = {"__metadata__": dict(sorted(metadata.items()))}
    offset = 0
    for name, entry, _, _, size in tensors:
        out_header[name] = {"dtype": entry["dtype"], "shape": entry["shape"],
                            "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(out_header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)

    with open(args.output, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for _, _, path, begin, size in tensors:
            with open(path, "rb") as f:
                f.seek(begin)
                out.write(f.read(size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
