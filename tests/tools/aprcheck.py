#!/usr/bin/env python3
"""Independent APR v2 reader and verifier (reference for the aprfs test suite).

Standalone on purpose: it shares no code with the C++ implementation or with
make_model.py. Section numbers refer to /work/shared/docs/apr-v2-format.md.

  aprcheck.py FILE.apr [--source MODEL_DIR] [--mmap] [--json] [--no-footer]

Checks the reader rules of §10.1, the layout rules every well-formed writer output
satisfies (§2-§8), and with --source that the file holds exactly the source model's
tensors, byte for byte (FP8 weights dequantized to BF16 per apr-quantization.md §9.4).
Exit status: 0 valid, 1 invalid, 2 usage error.
"""

import argparse
import array
import json
import math
import mmap
import os
import struct
import sys
import zlib

HEADER_SIZE = 64
ALIGN = 64
MAGIC = b"APR\x00"
FLAG_ROW_MAJOR = 0x0400
FLAG_COLUMN_MAJOR = 0x0800
CHUNK = 8 << 20  # every bulk read (CRC, data comparison) is bounded to 8 MiB
MAX_ERRORS = 500

# §6.1: codes the newest aprender reader accepts -> name.
DTYPE_NAMES = {
    0: "F32", 1: "F16", 3: "F64", 4: "I32", 5: "I64", 6: "I8", 7: "U8",
    8: "AprQ4(legacy)", 9: "AprQ8(legacy)", 12: "Q4K", 14: "Q6K", 30: "BF16",
    128: "AprQ4", 129: "AprQ8",
}
# Fixed-width codes: bytes per element.
DTYPE_WIDTH = {0: 4, 1: 2, 3: 8, 4: 4, 5: 8, 6: 1, 7: 1, 30: 2}

# safetensors dtype -> (bytes per element, APR code or None when not representable).
SAFETENSORS_DTYPES = {
    "F32": (4, 0), "F16": (2, 1), "BF16": (2, 30), "F64": (8, 3), "I32": (4, 4),
    "I64": (8, 5), "I8": (1, 6), "U8": (1, 7), "BOOL": (1, 7),
    "I16": (2, None), "U16": (2, None), "U32": (4, None), "U64": (8, None),
    "F8_E5M2": (1, None), "F8_E4M3": (1, None), "F8_E8M0": (1, None),
    "F8_E4M3FNUZ": (1, None), "F8_E5M2FNUZ": (1, None), "C64": (8, None),
}

# §4.2 typed metadata fields.
REQUIRED_INT_FIELDS = ("total_size", "param_count")
OPTIONAL_INT_FIELDS = (
    "hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size",
    "intermediate_size", "max_position_embeddings", "rope_type", "head_dim",
    "num_experts", "num_experts_per_tok", "moe_intermediate_size",
)
OPTIONAL_STRING_FIELDS = (
    "name", "description", "author", "license", "data_source", "data_license", "version",
    "source", "original_format", "created_at", "chat_template", "chat_format",
    "architecture", "hf_architecture", "hf_model_type",
)
OPTIONAL_FLOAT_FIELDS = ("rope_theta", "rms_norm_eps")
OPTIONAL_OBJECT_FIELDS = {
    "quantization": ("quant_type", "bits", "symmetric"),
    "sharding": ("shard_count", "shard_index", "total_size"),
    "special_tokens": (),
}
# §4.4: aliases realizar maps onto a canonical key; both together break its parser.
ALIASES = {
    "hidden_size": ("hidden_dim", "d_model", "n_embd"),
    "num_layers": ("n_layers", "num_hidden_layers", "n_layer"),
    "num_heads": ("n_heads", "num_attention_heads", "n_head"),
    "num_kv_heads": ("n_kv_heads", "num_key_value_heads"),
    "vocab_size": ("n_vocab",),
    "intermediate_size": ("ffn_dim", "intermediate_dim", "n_inner"),
    "max_position_embeddings": ("max_seq_len", "context_length", "n_ctx"),
    "rms_norm_eps": ("layer_norm_eps", "norm_eps"),
}
U64_MAX = (1 << 64) - 1


def align64(x):
    return (x + ALIGN - 1) // ALIGN * ALIGN


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Fatal(Exception):
    """A failure after which later checks cannot run (the error is already recorded)."""


class UsageError(Exception):
    pass


class Report:
    def __init__(self):
        self.errors = []
        self.warnings = []
        self.suppressed = 0
        self.info = {}

    def error(self, rule, msg):
        if len(self.errors) >= MAX_ERRORS:
            self.suppressed += 1
        else:
            self.errors.append("%s: %s" % (rule, msg))

    def warn(self, rule, msg):
        self.warnings.append("%s: %s" % (rule, msg))


# --------------------------------------------------------------------------------------
# Byte access: pread or mmap, always in bounded pieces
# --------------------------------------------------------------------------------------

class PreadSource:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size

    def read(self, off, n):
        """Up to n bytes at off (fewer only at end of file); for small reads."""
        buf = bytearray(n)
        got = self.readinto(memoryview(buf), off)
        return bytes(buf[:got])

    def readinto(self, view, off):
        """Fill view from off; returns the byte count (short only at end of file)."""
        got = 0
        while got < len(view):
            k = os.preadv(self.fd, [view[got:]], off + got)
            if k == 0:
                break
            got += k
        return got

    def close(self):
        os.close(self.fd)


class MmapSource(PreadSource):
    """Reads through a read-only shared mapping of the whole file (the loader path)."""

    def __init__(self, path):
        super().__init__(path)
        self.mm = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) if self.size else None
        self.view = memoryview(self.mm) if self.mm is not None else None

    def readinto(self, view, off):
        if self.view is None or off >= self.size:
            return 0
        n = min(len(view), self.size - off)
        view[:n] = self.view[off:off + n]
        if n >= (1 << 20):
            self._drop(off, n)
        return n

    def _drop(self, off, n):
        # Release pages already copied out so the resident set stays small even
        # when streaming a multi-GB tensor through the mapping.
        start = off - off % mmap.PAGESIZE
        if hasattr(self.mm, "madvise"):
            try:
                self.mm.madvise(mmap.MADV_DONTNEED, start, off + n - start)
            except (OSError, ValueError):
                pass

    def close(self):
        if self.mm is not None:
            self.view.release()
            self.mm.close()
        super().close()


def iter_chunks(src, off, n):
    """Yield (position, memoryview) covering [off, off+n) in CHUNK pieces.

    The view is a reused buffer: consume it before asking for the next piece.
    """
    buf = memoryview(bytearray(min(CHUNK, n)))
    end = off + n
    while off < end:
        k = src.readinto(buf[:min(CHUNK, end - off)], off)
        if k == 0:
            raise OSError("unexpected end of file at offset %d" % off)
        yield off, buf[:k]
        off += k


def first_nonzero(data):
    data = bytes(data)
    stripped = data.lstrip(b"\x00")
    return None if not stripped else len(data) - len(stripped)


def check_zero(rep, src, off, n, rule, what):
    """All bytes in [off, off+n) must be zero."""
    for pos, b in iter_chunks(src, off, n):
        k = first_nonzero(b)
        if k is not None:
            rep.error(rule, "%s: non-zero byte 0x%02x at absolute offset %d"
                      % (what, b[k], pos + k))
            return


# --------------------------------------------------------------------------------------
# Header (§3)
# --------------------------------------------------------------------------------------

def parse_header(raw):
    (magic, major, minor, flags, count, meta_off, meta_size, index_off, data_off,
     checksum) = struct.unpack_from("<4sBBHIQIQQI", raw, 0)
    return {
        "magic": magic, "version": (major, minor), "flags": flags, "tensor_count": count,
        "metadata_offset": meta_off, "metadata_size": meta_size,
        "tensor_index_offset": index_off, "data_offset": data_off, "checksum": checksum,
        "reserved": raw[44:64],
    }


def check_header(rep, src):
    if src.size < HEADER_SIZE:
        rep.error("reader.file-too-small", "file is %d bytes, need at least 64" % src.size)
        raise Fatal()
    raw = src.read(0, HEADER_SIZE)
    h = parse_header(raw)
    if h["magic"] != MAGIC:
        rep.error("reader.magic", "invalid magic %s at offset 0 (want 41505200)"
                  % h["magic"].hex())
        raise Fatal()
    # §3.4: CRC over bytes 0..39 followed by 44..63 (the field itself is cut out).
    crc = zlib.crc32(raw[0:40] + raw[44:64])
    if crc != h["checksum"]:
        rep.error("reader.header-crc", "header checksum at offset 40 is 0x%08x, computed 0x%08x"
                  % (h["checksum"], crc))
    if h["flags"] & FLAG_COLUMN_MAJOR:
        rep.error("reader.column-major", "flags 0x%04x at offset 6 has LAYOUT_COLUMN_MAJOR 0x0800"
                  % h["flags"])
    if h["version"] != (2, 0):
        rep.error("writer.version", "version %d.%d at offset 4, want 2.0" % h["version"])
    if h["flags"] != FLAG_ROW_MAJOR:
        rep.error("writer.flags", "flags 0x%04x at offset 6, want exactly 0x0400" % h["flags"])
    if any(h["reserved"]):
        rep.error("writer.reserved", "reserved bytes 44..63 are not all zero")
    return h


# --------------------------------------------------------------------------------------
# Metadata (§4)
# --------------------------------------------------------------------------------------

def load_json_no_duplicates(text, rep, rule):
    """json.loads that reports duplicate keys (writers must emit each key once)."""
    def hook(pairs):
        obj = {}
        for k, v in pairs:
            if k in obj:
                rep.error(rule, "duplicate JSON key %r" % k)
            obj[k] = v
        return obj
    def no_constants(name):
        # Python accepts NaN/Infinity; serde_json (the Rust readers) does not.
        raise ValueError("%s is not valid JSON" % name)
    return json.loads(text, object_pairs_hook=hook, parse_constant=no_constants)


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= U64_MAX


def check_metadata_types(rep, meta):
    """The typed fields of §4.2 must deserialize (integers must be JSON integers)."""
    def bad(key, want):
        rep.error("writer.metadata-type", "metadata key %r = %s: want %s"
                  % (key, json.dumps(meta[key])[:80], want))

    if "model_type" in meta and not isinstance(meta["model_type"], str):
        bad("model_type", "a string")
    for key in REQUIRED_INT_FIELDS:
        if key not in meta:
            rep.error("writer.metadata-type", "metadata key %r missing" % key)
        elif not is_uint(meta[key]):
            bad(key, "a non-negative integer")
    for key in OPTIONAL_INT_FIELDS:
        if key in meta and meta[key] is not None and not is_uint(meta[key]):
            bad(key, "a non-negative integer or null")
    for key in OPTIONAL_STRING_FIELDS:
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            bad(key, "a string or null")
    for key in OPTIONAL_FLOAT_FIELDS:
        v = meta.get(key)
        if key in meta and v is not None and (isinstance(v, bool) or
                                               not isinstance(v, (int, float))):
            bad(key, "a number or null")
    for key, required in OPTIONAL_OBJECT_FIELDS.items():
        v = meta.get(key)
        if key in meta and v is not None:
            if not isinstance(v, dict):
                bad(key, "an object or null")
            else:
                for sub in required:
                    if sub not in v:
                        rep.error("writer.metadata-type", "metadata %r lacks key %r" % (key, sub))


def check_metadata_aliases(rep, meta):
    for canonical, aliases in ALIASES.items():
        for alias in aliases:
            if alias in meta and canonical in meta:
                rep.error("writer.metadata-alias", "metadata has alias %r alongside canonical %r"
                          % (alias, canonical))
            elif alias in meta:
                rep.warn("writer.metadata-alias", "metadata has alias key %r (use %r)"
                         % (alias, canonical))


def check_metadata(rep, src, h):
    off, size = h["metadata_offset"], h["metadata_size"]
    if off + size > src.size:
        rep.error("reader.metadata-range", "metadata [%d, %d) extends past end of file (%d)"
                  % (off, off + size, src.size))
        raise Fatal()
    if off != HEADER_SIZE:
        rep.error("writer.metadata-offset", "metadata_offset is %d, want 64" % off)
    raw = src.read(off, size)
    try:
        meta = load_json_no_duplicates(raw.decode("utf-8"), rep, "writer.metadata-duplicate-key")
    except (UnicodeDecodeError, ValueError) as e:
        rep.error("reader.metadata-json", "metadata at offset %d (%d bytes) is not valid JSON: %s"
                  % (off, size, e))
        return None
    if not isinstance(meta, dict):
        rep.error("reader.metadata-json", "metadata at offset %d is not a JSON object" % off)
        return None
    check_metadata_types(rep, meta)
    check_metadata_aliases(rep, meta)
    return meta


# --------------------------------------------------------------------------------------
# Tensor index (§5)
# --------------------------------------------------------------------------------------

class Entry:
    def __init__(self, name_bytes, dtype, shape, offset, size, pos):
        self.name_bytes = name_bytes
        self.name = name_bytes.decode("utf-8", "replace")
        self.dtype = dtype
        self.shape = shape
        self.offset = offset
        self.size = size
        self.pos = pos  # absolute file offset of the entry

    def __repr__(self):
        return "tensor %r" % self.name


class Cursor:
    """Sequential reads of the index, fetched from the file in bounded windows."""

    def __init__(self, src, pos):
        self.src = src
        self.pos = pos
        self.buf = b""
        self.buf_start = pos

    def remaining(self):
        return self.src.size - self.pos

    def take(self, n):
        rel = self.pos - self.buf_start
        if rel + n > len(self.buf):
            self.buf = self.src.read(self.pos, max(n, 1 << 20))
            self.buf_start = self.pos
            rel = 0
        data = self.buf[rel:rel + n]
        self.pos += n
        return data


def parse_entry(rep, cur, i):
    """One entry per §5.1 with the bounds checks of §10.1 step 7."""
    start = cur.pos
    where = "index entry %d at offset %d" % (i, start)
    if cur.remaining() < 0:
        rep.error("reader.index-entry", "%s: starts past end of file" % where)
        raise Fatal()
    if cur.remaining() < 4:
        rep.error("reader.index-entry", "%s: buffer too small" % where)
        raise Fatal()
    (name_len,) = struct.unpack("<H", cur.take(2))
    if cur.remaining() < name_len + 18:
        rep.error("reader.index-entry", "%s: buffer too small for name (len %d)"
                  % (where, name_len))
        raise Fatal()
    name = cur.take(name_len)
    dtype, ndim = cur.take(2)
    if dtype not in DTYPE_NAMES:
        rep.error("reader.dtype", "%s (%r): invalid dtype code %d"
                  % (where, name.decode("utf-8", "replace"), dtype))
        raise Fatal()
    if cur.remaining() < 8 * ndim:
        rep.error("reader.index-entry", "%s: buffer too small for shape (ndim %d)" % (where, ndim))
        raise Fatal()
    shape = list(struct.unpack("<%dQ" % ndim, cur.take(8 * ndim)))
    if cur.remaining() < 16:
        rep.error("reader.index-entry", "%s: buffer too small for offset/size" % where)
        raise Fatal()
    offset, size = struct.unpack("<QQ", cur.take(16))
    return Entry(name, dtype, shape, offset, size, start)


def check_entry_writer_rules(rep, e):
    try:
        e.name_bytes.decode("utf-8")
    except UnicodeDecodeError:
        rep.error("writer.name", "%r at index offset %d: name is not valid UTF-8" % (e, e.pos))
    if len(e.name_bytes) > 256:
        rep.error("writer.name", "%r: name is %d bytes, max 256" % (e, len(e.name_bytes)))
    if len(e.shape) > 8:
        rep.error("writer.ndim", "%r: %d dims, max 8" % (e, len(e.shape)))
    expected = expected_sizes(e.dtype, e.shape)
    if expected is not None and e.size not in expected:
        rep.error("writer.tensor-size", "%r: size %d does not match dtype %s shape %s (want %s)"
                  % (e, e.size, DTYPE_NAMES[e.dtype], e.shape,
                     " or ".join(str(x) for x in sorted(expected))))
    if e.offset % ALIGN:
        rep.error("writer.alignment", "%r: offset %d is not a multiple of 64" % (e, e.offset))


def expected_sizes(dtype, shape):
    """Allowed payload sizes for a dtype and shape (§6), or None if unknown."""
    n = numel(shape)
    if dtype in DTYPE_WIDTH:
        return {n * DTYPE_WIDTH[dtype]}
    if dtype in (8, 128):
        return {(n + 31) // 32 * 18}
    if dtype in (9, 129):
        return {4 + n if n else 0}
    if dtype in (12, 14):
        block = 144 if dtype == 12 else 210
        sizes = {(n + 255) // 256 * block}
        if len(shape) == 2:  # row-padded matrices (§6.3)
            sizes.add(shape[0] * ((shape[1] + 255) // 256) * block)
        return sizes
    return None


def check_index(rep, src, h):
    index_off = h["tensor_index_offset"]
    want_index_off = HEADER_SIZE + align64(h["metadata_size"])
    if index_off != want_index_off:
        rep.error("writer.index-offset", "tensor_index_offset is %d, want 64 + align64(%d) = %d"
                  % (index_off, h["metadata_size"], want_index_off))
    meta_end = h["metadata_offset"] + h["metadata_size"]
    if index_off >= meta_end and index_off <= src.size:
        check_zero(rep, src, meta_end, index_off - meta_end, "writer.padding",
                   "metadata padding [%d, %d)" % (meta_end, index_off))
    if index_off > src.size:
        rep.error("reader.index-entry", "tensor_index_offset %d is past end of file (%d)"
                  % (index_off, src.size))
        raise Fatal()

    cur = Cursor(src, index_off)
    entries = [parse_entry(rep, cur, i) for i in range(h["tensor_count"])]
    index_end = cur.pos
    rep.info["index_bytes"] = index_end - index_off

    data_off = h["data_offset"]
    if index_end > data_off:
        rep.error("writer.index-end", "index ends at %d, after data_offset %d"
                  % (index_end, data_off))
    want_data_off = index_off + align64(index_end - index_off)
    if data_off != want_data_off:
        rep.error("writer.data-offset", "data_offset is %d, want %d + align64(%d) = %d"
                  % (data_off, index_off, index_end - index_off, want_data_off))
    if data_off % ALIGN:
        rep.error("writer.alignment", "data_offset %d is not a multiple of 64" % data_off)
    if index_end <= data_off <= src.size:
        check_zero(rep, src, index_end, data_off - index_end, "writer.padding",
                   "index padding [%d, %d)" % (index_end, data_off))

    check_names(rep, entries)
    for e in entries:
        check_entry_writer_rules(rep, e)
    return entries


def check_names(rep, entries):
    seen = set()
    for prev, e in zip([None] + entries, entries):
        if prev is not None and e.name_bytes < prev.name_bytes:
            rep.error("reader.sorted", "%r (index offset %d) sorts before previous %r"
                      % (e, e.pos, prev))
        if e.name_bytes in seen:
            rep.error("writer.duplicate-name", "%r appears more than once (index offset %d)"
                      % (e, e.pos))
        seen.add(e.name_bytes)


# --------------------------------------------------------------------------------------
# Data section (§7) and footer (§8)
# --------------------------------------------------------------------------------------

def check_data_layout(rep, src, h, entries):
    """Bounds, overlaps, gaps, padding; returns the absolute end of the data section."""
    data_off = h["data_offset"]
    data_end = data_off
    for e in entries:
        end = data_off + e.offset + e.size
        if end > src.size:
            rep.error("writer.tensor-bounds", "%r: data [%d, %d) extends past end of file (%d)"
                      % (e, data_off + e.offset, end, src.size))
        data_end = max(data_end, data_off + e.offset + align64(e.size))
    rep.info["data_end"] = data_end

    # Distinct non-empty extents; entries with identical (offset, size) alias the same bytes.
    extents = {}
    for e in entries:
        if e.size:
            extents.setdefault((e.offset, e.size), []).append(e)
    aliases = [[x.name for x in group] for group in extents.values() if len(group) > 1]
    if aliases:
        rep.info["aliases"] = aliases

    covered = 0  # data-relative end of everything seen so far
    for (offset, size), group in sorted(extents.items()):
        if offset < covered:
            rep.error("writer.overlap", "%r [%d, %d) overlaps an earlier tensor (data ends at %d)"
                      % (group[0], offset, offset + size, covered))
        elif offset > covered:
            rep.error("writer.data-gap", "unused bytes [%d, %d) before %r"
                      % (data_off + covered, data_off + offset, group[0]))
        covered = max(covered, offset + align64(size))
        pad_start = data_off + offset + size
        pad_end = min(data_off + offset + align64(size), src.size)
        if pad_end > pad_start:
            check_zero(rep, src, pad_start, pad_end - pad_start, "writer.padding",
                       "padding after %r" % group[0])
    for e in entries:
        if not e.size and e.offset > covered:
            rep.error("writer.tensor-bounds", "empty %r has offset %d past the data end %d"
                      % (e, e.offset, covered))

    if src.size != data_end + 4:
        rep.error("writer.file-length", "file is %d bytes, want data end %d + 4 footer = %d"
                  % (src.size, data_end, data_end + 4))
    return data_end


def check_footer(rep, src, data_end):
    """§8: u32 LE CRC32 of every preceding byte, streamed in 8 MiB chunks."""
    if src.size == data_end:
        rep.error("writer.footer", "footer missing: file ends at the data end %d" % data_end)
        return "absent"
    if src.size < 4:
        return "absent"
    crc = 0
    for _, b in iter_chunks(src, 0, src.size - 4):
        crc = zlib.crc32(b, crc)
    (stored,) = struct.unpack("<I", src.read(src.size - 4, 4))
    if crc != stored:
        rep.error("writer.footer", "footer at offset %d is 0x%08x, CRC32 of bytes [0, %d) "
                  "is 0x%08x"
                  % (src.size - 4, stored, src.size - 4, crc))
        return "mismatch"
    return "ok"


# --------------------------------------------------------------------------------------
# Source model (safetensors, hf-hub.md §7)
# --------------------------------------------------------------------------------------

class SourceTensor:
    def __init__(self, name, dtype, shape, path, begin, nbytes):
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.path = path
        self.begin = begin  # absolute offset in the shard file
        self.nbytes = nbytes


def parse_safetensors(rep, path):
    """Header of one shard, validated like the official reader (hf-hub.md §7.3)."""
    fname = os.path.basename(path)

    def bad(msg):
        rep.error("source.safetensors", "%s: %s" % (fname, msg))
        return {}

    try:
        with open(path, "rb") as f:
            file_len = os.fstat(f.fileno()).st_size
            if file_len < 8:
                return bad("file shorter than 8 bytes")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000 or 8 + n > file_len:
                return bad("header length %d invalid for file of %d bytes" % (n, file_len))
            text = f.read(n)
    except OSError as e:
        return bad("cannot read: %s" % e)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return bad("header is not valid JSON: %s" % e)
    if not isinstance(header, dict):
        return bad("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and
                                 all(isinstance(v, str) for v in meta.values())):
        bad("__metadata__ must map strings to strings")

    tensors = {}
    spans = []
    for name, info in header.items():
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
            assert dtype in SAFETENSORS_DTYPES
            assert isinstance(shape, list) and all(is_uint(d) for d in shape)
            assert is_uint(b) and is_uint(e) and e >= b
        except (KeyError, TypeError, ValueError, AssertionError):
            bad("tensor %r has an invalid entry %s" % (name, json.dumps(info)[:120]))
            continue
        if e - b != numel(shape) * SAFETENSORS_DTYPES[dtype][0]:
            bad("tensor %r: data_offsets [%d, %d) do not match %s %s" % (name, b, e, dtype, shape))
        tensors[name] = SourceTensor(name, dtype, shape, path, 8 + n + b, e - b)
        spans.append((b, e, name))
    end = 0
    for b, e, name in sorted(spans):
        if b != end:
            bad("tensor %r starts at %d, previous data ends at %d" % (name, b, end))
        end = max(end, e)
    if 8 + n + end != file_len:
        bad("data ends at %d but file is %d bytes" % (8 + n + end, file_len))
    return tensors


def load_source(rep, model_dir):
    """name -> SourceTensor from the index's weight_map, model.safetensors, or all shards."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index_path):
        try:
            with open(index_path, "rb") as f:
                weight_map = json.load(f)["weight_map"]
            assert isinstance(weight_map, dict)
        except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
            rep.error("source.index", "model.safetensors.index.json unusable: %s" % e)
            raise Fatal()
        shards, out = {}, {}
        for name, fname in weight_map.items():
            if not isinstance(fname, str) or os.path.isabs(fname) or ".." in fname.split("/"):
                rep.error("source.index", "tensor %r maps to unsafe path %r" % (name, fname))
                continue
            path = os.path.join(model_dir, fname)
            if fname not in shards:
                shards[fname] = parse_safetensors(rep, path) if os.path.exists(path) else None
                if shards[fname] is None:
                    rep.error("source.index", "shard %r (for tensor %r) does not exist"
                              % (fname, name))
            if shards[fname] is not None:
                if name in shards[fname]:
                    out[name] = shards[fname][name]
                else:
                    rep.error("source.index", "tensor %r not found in its shard %r"
                              % (name, fname))
        rep.info["source_layout"] = "index"
        return out
    if os.path.exists(single):
        rep.info["source_layout"] = "single"
        return parse_safetensors(rep, single)
    files = sorted(x for x in os.listdir(model_dir) if x.endswith(".safetensors"))
    if not files:
        rep.error("source.files", "no *.safetensors in %s" % model_dir)
        raise Fatal()
    out = {}
    for fname in files:
        for name, t in parse_safetensors(rep, os.path.join(model_dir, fname)).items():
            if name in out:
                rep.error("source.duplicate", "tensor %r is in both %s and %s"
                          % (name, os.path.basename(out[name].path), fname))
            out[name] = t
    rep.info["source_layout"] = "noindex"
    return out


def compare_bytes(rep, src, apr_pos, path, file_pos, n, what):
    """Chunked equality of APR bytes and source-file bytes; returns bytes compared."""
    # Whole bytearrays compare with memcmp; memoryview == is ~25x slower.
    mine, theirs = bytearray(min(CHUNK, n)), bytearray(min(CHUNK, n))
    mine_v, theirs_v = memoryview(mine), memoryview(theirs)
    fd = os.open(path, os.O_RDONLY)
    try:
        rel = 0
        while rel < n:
            k = min(CHUNK, n - rel)
            got_a = src.readinto(mine_v[:k], apr_pos + rel)
            got_b = os.preadv(fd, [theirs_v[:k]], file_pos + rel)
            if got_a != k or got_b != k:
                rep.error("source.data", "%s: short read at byte %d of the tensor (APR %d, "
                          "source %d of %d bytes)" % (what, rel, got_a, got_b, k))
                return rel
            if k == len(mine):
                same = mine == theirs
            else:  # last, partial chunk
                same = mine_v[:k].tobytes() == theirs_v[:k].tobytes()
            if not same:
                i = next(i for i in range(k) if mine[i] != theirs[i])
                rep.error("source.data", "%s: byte %d of the tensor differs (APR offset %d, "
                          "%s offset %d)" % (what, rel + i, apr_pos + rel + i,
                                             os.path.basename(path), file_pos + rel + i))
                return rel
            rel += k
    finally:
        mine_v.release()
        theirs_v.release()
        os.close(fd)
    return n


def check_entry_matches(rep, e, st):
    """dtype code, shape and size of APR entry e against source tensor st."""
    code = SAFETENSORS_DTYPES[st.dtype][1]
    ok = True
    if code is None:
        rep.error("source.dtype", "%r: source dtype %s has no APR code" % (e, st.dtype))
        ok = False
    elif e.dtype != code:
        rep.error("source.dtype", "%r: APR dtype code %d, source %r is %s (code %d)"
                  % (e, e.dtype, st.name, st.dtype, code))
        ok = False
    if e.shape != st.shape:
        rep.error("source.shape", "%r: APR shape %s, source %r has %s"
                  % (e, e.shape, st.name, st.shape))
        ok = False
    if e.size != st.nbytes:
        rep.error("source.size", "%r: APR size %d, source %r has %d"
                  % (e, e.size, st.name, st.nbytes))
        ok = False
    return ok


# --------------------------------------------------------------------------------------
# FP8 weights (apr-quantization.md §9): the plain view serves them as BF16
# --------------------------------------------------------------------------------------

def e4m3_float(code):
    """float8_e4m3fn (safetensors F8_E4M3): 1-4-3 bits, bias 7, 0x7F/0xFF NaN, no Inf."""
    if code & 0x7F == 0x7F:
        return float("nan")
    exp, frac = (code >> 3) & 0xF, code & 0x7
    mag = math.ldexp(frac, -9) if exp == 0 else math.ldexp(8 + frac, exp - 10)
    return -mag if code & 0x80 else mag


E4M3_FLOATS = [e4m3_float(c) for c in range(256)]


def bf16_translation(scale):
    """(low-byte, high-byte) translate tables: FP8 code -> BF16 of f32(code value * scale).

    array('f') rounds each product to binary32 once (RNE); then binary32 -> bfloat16 RNE,
    NaN kept quiet. Every element of one block tile shares `scale`, so the whole tile is
    converted with two bytes.translate calls.
    """
    products = array.array("f", [v * scale for v in E4M3_FLOATS])
    words = array.array("I", products.tobytes())
    halves = []
    for w in words:
        if w & 0x7FFFFFFF > 0x7F800000:
            halves.append((w >> 16) | 0x40)
        else:
            halves.append((w + 0x7FFF + ((w >> 16) & 1)) >> 16)
    return bytes(x & 0xFF for x in halves), bytes(x >> 8 for x in halves)


def fp8_block_size(model_dir):
    try:
        with open(os.path.join(model_dir, "config.json"), "rb") as f:
            qc = json.load(f).get("quantization_config")
        block = qc["weight_block_size"] if isinstance(qc, dict) else [128, 128]
    except (OSError, ValueError, KeyError, AttributeError):
        block = [128, 128]
    if not (isinstance(block, list) and len(block) == 2 and
            all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        return None
    return block


def fp8_pairs(rep, source, model_dir):
    """{weight name: (scale SourceTensor, block)} for every well-formed FP8 weight + companion.

    A malformed pair is reported: the view should have refused the model.
    """
    pairs = {}
    block = None
    for name, st in sorted(source.items()):
        scale = source.get(name + "_scale_inv")
        if st.dtype != "F8_E4M3" or scale is None:
            continue
        block = block or fp8_block_size(model_dir)
        if block is None:
            rep.error("source.fp8", "config.json quantization_config.weight_block_size is not "
                      "two positive integers")
            return {}
        want = ([-(-st.shape[0] // block[0]), -(-st.shape[1] // block[1])]
                if len(st.shape) == 2 else None)
        if want is None or scale.dtype not in ("F32", "F8_E8M0", "U8") or scale.shape != want:
            rep.error("source.fp8", "%r %s with companion %s %s: not a 2-D weight with "
                      "[ceil(R/%d), ceil(C/%d)] F32/F8_E8M0/U8 scales"
                      % (name, st.shape, scale.dtype, scale.shape, block[0], block[1]))
            continue
        pairs[name] = (scale, block)
    return pairs


def read_scales(scale):
    with open(scale.path, "rb") as f:
        f.seek(scale.begin)
        raw = f.read(scale.nbytes)
    if scale.dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    # ue8m0: one exponent byte, s = 2^(byte - 127) (byte 255 overflows binary32 to Inf).
    return [math.ldexp(1.0, b - 127) if b < 255 else float("inf") for b in raw]


def check_fp8_entry(rep, e, st):
    ok = True
    if e.dtype != 30:
        rep.error("source.dtype", "%r: APR dtype code %d, FP8 source %r must appear as BF16 "
                  "(code 30)" % (e, e.dtype, st.name))
        ok = False
    if e.shape != st.shape:
        rep.error("source.shape", "%r: APR shape %s, source %r has %s"
                  % (e, e.shape, st.name, st.shape))
        ok = False
    if e.size != 2 * st.nbytes:
        rep.error("source.size", "%r: APR size %d, BF16 of FP8 %r is %d"
                  % (e, e.size, st.name, 2 * st.nbytes))
        ok = False
    return ok


def compare_fp8(rep, src, apr_pos, st, scale, block, what):
    """Dequantize st row block by row block and compare with the APR's BF16 bytes."""
    rows, cols = st.shape
    b_rows, b_cols = block
    tiles = -(-cols // b_cols)
    scales = read_scales(scale)
    fd = os.open(st.path, os.O_RDONLY)
    try:
        for r0 in range(0, rows, b_rows):
            n_rows = min(b_rows, rows - r0)
            codes = os.pread(fd, n_rows * cols, st.begin + r0 * cols)
            row_scales = scales[(r0 // b_rows) * tiles:(r0 // b_rows + 1) * tiles]
            if not any(codes) and all(math.isfinite(x) for x in row_scales):
                want = bytes(2 * len(codes))  # zeros stay +0 (sparse models)
            else:
                tables = [bf16_translation(x) for x in row_scales]
                out = bytearray(2 * len(codes))
                for r in range(n_rows):
                    for t, (lo, hi) in enumerate(tables):
                        a = r * cols + t * b_cols
                        seg = codes[a:min(a + b_cols, (r + 1) * cols)]
                        out[2 * a:2 * (a + len(seg)):2] = seg.translate(lo)
                        out[2 * a + 1:2 * (a + len(seg)):2] = seg.translate(hi)
                want = bytes(out)
            pos = apr_pos + 2 * r0 * cols
            got = src.read(pos, len(want))
            if got != want:
                i = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                         min(len(got), len(want)))
                rep.error("source.data", "%s: byte %d of the BF16 dequantization differs (APR "
                          "offset %d)" % (what, 2 * r0 * cols + i, pos + i))
                return 2 * r0 * cols
    finally:
        os.close(fd)
    return 2 * st.nbytes


def check_against_source(rep, src, h, entries, meta, model_dir):
    source = load_source(rep, model_dir)
    rep.info["source_tensors"] = len(source)
    fp8 = fp8_pairs(rep, source, model_dir)
    companions = {scale.name for scale, _ in fp8.values()}
    rep.info["fp8_weights"] = len(fp8)
    by_name = {}
    for e in entries:
        by_name.setdefault(e.name, e)  # first match wins, like aprender/realizar lookups
    data_off = h["data_offset"]
    compared = 0

    def compare(e, st, what):
        """Type, shape, size and bytes of APR entry e against source tensor st."""
        if st.name in fp8:
            if not check_fp8_entry(rep, e, st):
                return 0
        elif not check_entry_matches(rep, e, st):
            return 0
        if data_off + e.offset + e.size > src.size:
            return 0  # already reported as writer.tensor-bounds
        if st.name in fp8:
            scale, block = fp8[st.name]
            return compare_fp8(rep, src, data_off + e.offset, st, scale, block, what)
        return compare_bytes(rep, src, data_off + e.offset, st.path, st.begin, st.nbytes, what)

    for name, st in sorted(source.items()):
        e = by_name.get(name)
        if name in companions:
            if e is not None:
                rep.error("source.fp8", "%r is the scale of an FP8 weight served as BF16: it "
                          "must not be in the APR" % e)
        elif e is None:
            rep.error("source.missing-tensor", "source tensor %r is not in the APR index" % name)
        else:
            compared += compare(e, st, repr(e))

    embed = source.get("model.embed_tokens.weight")
    for e in entries:
        if e.name in source:
            continue
        if e.name == "lm_head.weight" and embed is not None:
            # Synthesized tied head: must equal the source embedding (type, shape, bytes).
            compared += compare(e, embed, "%r (tied to model.embed_tokens.weight)" % e)
        else:
            rep.error("source.extra-tensor", "%r (index offset %d) is not in the source model"
                      % (e, e.pos))
    rep.info["bytes_compared"] = compared
    if meta is not None:
        check_source_metadata(rep, entries, meta)


def check_source_metadata(rep, entries, meta):
    total = sum(numel(e.shape) for e in entries)
    if meta.get("param_count") != total:
        rep.error("source.param-count", "metadata param_count %r, sum of element counts is %d"
                  % (meta.get("param_count"), total))
    shapes = meta.get("tensor_shapes")
    if not isinstance(shapes, dict):
        rep.error("source.tensor-shapes", "metadata tensor_shapes missing or not an object")
        return
    for e in entries:
        if shapes.get(e.name) != e.shape:
            rep.error("source.tensor-shapes", "%r: tensor_shapes has %s, index has %s"
                      % (e, json.dumps(shapes.get(e.name)), e.shape))
    names = {e.name for e in entries}
    for extra in sorted(set(shapes) - names):
        rep.error("source.tensor-shapes", "tensor_shapes names %r which is not in the index"
                  % extra)


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------

def check_file(path, source_dir=None, use_mmap=False, footer=True):
    rep = Report()
    rep.info["footer"] = "skipped"
    try:
        src = (MmapSource if use_mmap else PreadSource)(path)
    except OSError as e:
        raise UsageError("cannot open %s: %s" % (path, e))
    rep.info["file_size"] = src.size
    try:
        h = check_header(rep, src)
        rep.info.update({k: h[k] for k in ("flags", "tensor_count", "metadata_size",
                                             "tensor_index_offset", "data_offset")})
        meta = check_metadata(rep, src, h)
        entries = check_index(rep, src, h)
        rep.info["tensors"] = len(entries)
        data_end = check_data_layout(rep, src, h, entries)
        if footer:
            rep.info["footer"] = check_footer(rep, src, data_end)
        if source_dir is not None:
            check_against_source(rep, src, h, entries, meta, source_dir)
    except Fatal:
        pass
    except OSError as e:
        rep.error("io", "read error: %s" % e)
    finally:
        src.close()
    return rep


def print_human(path, rep):
    for w in rep.warnings:
        print("WARNING %s" % w)
    for e in rep.errors:
        print("ERROR %s" % e)
    if rep.suppressed:
        print("ERROR ... %d more errors suppressed" % rep.suppressed)
    status = "OK" if not rep.errors else "INVALID"
    print("%s: %s (%s tensors, %s bytes, footer %s)"
          % (status, path, rep.info.get("tensors", "?"), rep.info.get("file_size", "?"),
             rep.info["footer"]))


def main(argv=None):
    p = argparse.ArgumentParser(
        description="Verify an APR v2 file (independent reference reader).")
    p.add_argument("apr_file", metavar="APR_FILE")
    p.add_argument("--source", metavar="MODEL_DIR",
                   help="compare against this safetensors model folder")
    p.add_argument("--mmap", action="store_true", help="read the APR file through mmap")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--no-footer", action="store_true", help="skip the footer CRC pass")
    args = p.parse_args(argv)
    if args.source is not None and not os.path.isdir(args.source):
        p.error("--source %s is not a directory" % args.source)
    try:
        rep = check_file(args.apr_file, args.source, args.mmap, not args.no_footer)
    except UsageError as e:
        p.error(str(e))
    ok = not rep.errors
    if args.json:
        out = {"ok": ok, "file": args.apr_file, "errors": rep.errors,
               "errors_suppressed": rep.suppressed, "warnings": rep.warnings,
               "tensors": rep.info.get("tensors", 0), "mmap": args.mmap}
        out.update(rep.info)
        print(json.dumps(out, indent=2))
    else:
        print_human(args.apr_file, rep)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
