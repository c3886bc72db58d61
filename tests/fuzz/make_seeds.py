#!/usr/bin/env python3
"""Regenerates the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) from models
made by tests/tools/make_model.py, and .apr files materialized through a real aprfs mount.
Usage (root, after a build): tests/fuzz/make_seeds.py [path/to/aprfs]"""
import json, os, shutil, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APRFS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/fs/aprfs")
MAX_SEED = 64 << 10

def put(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data[:MAX_SEED])

def main():
    for target in ("safetensors_import_fuzz", "json_inputs_fuzz", "apr_reader_fuzz"):
        shutil.rmtree(os.path.join(HERE, "corpus", target), ignore_errors=True)
    work = tempfile.mkdtemp(prefix="aprfs-seeds-")
    try:
        models = {
            "tiny": ["--preset", "tiny"],
            "edge": ["--preset", "edge"],
            "llama": ["--preset", "llama-tiny", "--unaligned", "--tie-embeddings"],
            "llama2": ["--preset", "llama2-tiny"],
        }
        for name, args in models.items():
            out = os.path.join(work, "src", name)
            subprocess.run([sys.executable, os.path.join(ROOT, "tests/tools/make_model.py"), out]
                           + args, check=True, stdout=subprocess.DEVNULL)
            for i, shard in enumerate(sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))):
                with open(os.path.join(out, shard), "rb") as f:
                    head = f.read(8)
                    (n,) = struct.unpack("<Q", head)
                    put("safetensors_import_fuzz", f"{name}-{i}", head + f.read(n))
            for prefix, file in ((b"\x00", "model.safetensors.index.json"),
                                 (b"\x01", "config.json"), (b"\x02", "tokenizer.json"),
                                 (b"\x03", "tokenizer.model")):
                path = os.path.join(out, file)
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        put("json_inputs_fuzz", f"{name}-{file}", prefix + f.read())
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt)
        subprocess.run([APRFS, "mount", mnt, "--no-hf-cache", "--source",
                        os.path.join(work, "src")], check=True)
        try:
            for apr in sorted(os.listdir(mnt)):
                if apr.endswith(".apr"):
                    with open(os.path.join(mnt, apr), "rb") as f:
                        data = f.read()
                    if len(data) <= MAX_SEED:
                        put("apr_reader_fuzz", apr, data)
                    else:  # header, metadata and index only: the reader's early checks
                        (data_offset,) = struct.unpack_from("<Q", data, 32)
                        put("apr_reader_fuzz", apr + ".prefix", data[:data_offset])
        finally:
            subprocess.run([APRFS, "umount", mnt], check=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for target in ("safetensors_import_fuzz", "json_inputs_fuzz", "apr_reader_fuzz"):
        folder = os.path.join(HERE, "corpus", target)
        print(target, len(os.listdir(folder)) if os.path.isdir(folder) else 0, "seeds")

if __name__ == "__main__":
    main()
