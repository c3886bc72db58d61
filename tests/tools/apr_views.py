#!/usr/bin/env python3
"""Independent reference writer of aprfs' computed APR views (q4k, f16, int8, int4).

Standalone on purpose: standard library only, written from the specs, sharing no code with
the C++ `format/` sources or with make_model.py / aprcheck.py. It writes the whole file that
`apr import MODEL --quantize q4k|fp16|int8|int4 -o NAME.<view>.apr` would write, after
dequantizing FP8 (F8_E4M3 + `weight_scale_inv`) weights to BF16.

  apr_views.py MODEL_DIR --view q4k|f16|int8|int4 --name STEM -o OUT_FILE
  apr_views.py --selftest

Exit status: 0 written; 3 aprender would refuse this view (one line on stderr names the file,
the tensor and the rule; nothing is written); 2 usage error or unreadable input.

Citations: [Q §n] = shared/docs/apr-quantization.md, [C §n] = shared/docs/apr-v2-format.md,
[H §n] = shared/docs/hf-hub.md.
"""

import argparse
import array
import hashlib
import json
import math
import os
import struct
import sys
import tempfile
import zlib
from fractions import Fraction

INF = float("inf")
NAN = float("nan")

VIEWS = ("q4k", "f16", "int8", "int4")
# APR dtype codes [C §6.1].
F32_CODE, F16_CODE, Q4K_CODE, Q6K_CODE, BF16_CODE, APRQ4_CODE, APRQ8_CODE = 0, 1, 12, 14, 30, 128, 129


class Refusal(Exception):
    """aprender would not produce this view (exit 3)."""


class BadInput(Exception):
    """Usage error or unreadable model (exit 2)."""


# ======================================================================================
# binary32 arithmetic [Q §4.1, §4.2]
# ======================================================================================
# Python floats are binary64. One + - * / in binary64 followed by one rounding to binary32 is
# exactly the binary32 operation (53 >= 2*24 + 2). array('f') stores with the C cast, i.e.
# round-to-nearest-even, overflowing to +-Inf like the hardware (struct 'f' would raise).

_SCALAR = array.array("f", [0.0])


def f32(x):
    """x rounded to binary32 (RNE, overflow to Inf)."""
    _SCALAR[0] = x
    return _SCALAR[0]


def f32_all(values):
    """Each value rounded to binary32, as a list of floats."""
    return array.array("f", values).tolist()


def f32_to_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_to_f32(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def le(arr):
    """Little-endian bytes of an array (the APR and safetensors byte order)."""
    if sys.byteorder == "big":
        arr = array.array(arr.typecode, arr)
        arr.byteswap()
    return arr.tobytes()


def from_le(typecode, data):
    arr = array.array(typecode)
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr


def fdiv(a, b):
    """IEEE a / b (Python raises on a zero divisor; IEEE gives +-Inf or NaN)."""
    if b != 0:
        return a / b
    if a != a or a == 0:
        return NAN
    return math.copysign(INF, a) * math.copysign(1.0, b)


def fmax_fold(start, values):
    """fold(start, fmax, values): fmax ignores a NaN operand [Q §4.2]."""
    m = start
    for v in values:
        if v > m:
            m = v
    return m


def fmin_fold(start, values):
    m = start
    for v in values:
        if v < m:
            m = v
    return m


def round_clamp(t, lo, hi):
    """Rust `t.round().clamp(lo, hi) as u8/i8` for an f32 value t (lo <= 0 < hi) [Q §4.2].

    round = ties away from zero; clamp keeps NaN; `as` maps NaN to 0 and saturates.
    """
    if t != t:
        return 0
    if t >= hi:
        return hi
    if t <= lo:
        return lo
    # |t| + 0.5 is exact in binary64 for an f32 t that is not already an integer.
    r = int(t + 0.5) if t >= 0 else -int(0.5 - t)
    return hi if r > hi else lo if r < lo else r


# Constants are binary32 [Q §4.1].
F16_MIN_NORMAL = f32(6.1e-5)  # bits 0x387FDA40
EPS = f32(1e-10)              # bits 0x2EDBE6FF


# ======================================================================================
# f32 <-> f16, bf16 [Q §4.4, §3.1, §9.4]
# ======================================================================================

def f32_bits_to_f16(b):
    """IEEE binary32 -> binary16, round to nearest even, subnormals, NaN quieted [Q §4.4]."""
    sign = (b >> 16) & 0x8000
    e = (b >> 23) & 0xFF
    m = b & 0x7FFFFF
    if e == 0xFF:
        return sign | 0x7C00 | ((0x0200 | (m >> 13)) if m else 0)
    he = e - 127 + 15
    if he >= 31:
        return sign | 0x7C00
    if he <= 0:
        if he < -10:
            return sign
        m |= 0x800000
        shift = 14 - he
        hm = m >> shift
        rb = 1 << (shift - 1)
        if (m & rb) and (m & (3 * rb - 1)):
            hm += 1
        return sign | hm
    out = sign | (he << 10) | (m >> 13)
    if (m & 0x1000) and (m & 0x2FFF):
        out += 1  # a carry may run into the exponent, up to Inf
    return out


def f16_to_f32_bits(h):
    """Exact binary16 -> binary32 widening; a NaN keeps its payload shifted left by 13 [Q §3.1]."""
    sign = (h & 0x8000) << 16
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0x1F:
        return sign | 0x7F800000 | (m << 13)
    if e:
        return sign | ((e - 15 + 127) << 23) | (m << 13)
    if not m:
        return sign
    # Subnormal half: normalize into a binary32 normal.
    shift = 0
    while not m & 0x400:
        m <<= 1
        shift += 1
    return sign | ((127 - 15 + 1 - shift) << 23) | ((m & 0x3FF) << 13)


_F16_WIDEN = None


def f16_widen_table():
    global _F16_WIDEN
    if _F16_WIDEN is None:
        _F16_WIDEN = array.array("I", (f16_to_f32_bits(h) for h in range(65536)))
    return _F16_WIDEN


def f32_bits_to_bf16(b):
    """binary32 -> bfloat16, round to nearest even; NaN kept quiet [Q §9.4]."""
    if (b & 0x7FFFFFFF) > 0x7F800000:
        return (b >> 16) | 0x0040
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def f16_bytes_from_f32_bits(bits):
    """F16 payload (code 1) of f32 values given by their bits [Q §5.1]."""
    return le(array.array("H", [f32_bits_to_f16(b) for b in bits]))


# ======================================================================================
# Encoders [Q §5]
# ======================================================================================

def quotients(values, scale):
    """f32(v / scale) for each v."""
    if scale != 0:
        return f32_all([v / scale for v in values])
    return f32_all([fdiv(v, scale) for v in values])


def encode_aprq8(x):
    """AprQ8, code 129: f32 scale, then one i8 per element [Q §5.2]."""
    if not x:
        return b""
    max_abs = fmax_fold(0.0, (abs(v) for v in x))
    scale = 1.0 if max_abs == 0.0 else f32(max_abs / 127)
    q = [round_clamp(t, -127, 127) & 0xFF for t in quotients(x, scale)]
    return struct.pack("<f", scale) + bytes(q)


def aprq4_block(block):
    """One AprQ4 block (<= 32 values): f16 scale + 16 nibble bytes [Q §5.3]."""
    max_abs = fmax_fold(0.0, (abs(v) for v in block))
    scale = 1.0 if max_abs == 0.0 else f32(max_abs / 7)  # quantize with the unrounded scale
    packed = bytearray(16)
    for i, t in enumerate(quotients(block, scale)):
        nib = (round_clamp(t, -8, 7) + 8) & 0x0F
        packed[i >> 1] |= nib << (4 * (i & 1))
    return struct.pack("<H", f32_bits_to_f16(f32_to_bits(scale))) + bytes(packed)


def encode_aprq4(x):
    """AprQ4, code 128: 18-byte blocks of 32 elements, last one short [Q §5.3]."""
    return b"".join(aprq4_block(x[k:k + 32]) for k in range(0, len(x), 32))


def aprq4_nibble_eights(payload, n):
    """How many of the n element nibbles of an AprQ4 payload are 8 (the density rule, §5.3)."""
    count = 0
    for i in range(n):
        byte = payload[18 * (i >> 5) + 2 + ((i & 31) >> 1)]
        count += ((byte >> (4 * (i & 1))) & 0x0F) == 8
    return count


def q4k_superblock(x):
    """One 256-value Q4_K super-block, trueno-quant's encoder with its quirks [Q §5.4.2]."""
    sub_scale, sub_min = [], []
    for j in range(8):
        seg = x[32 * j:32 * j + 32]
        lo = fmin_fold(INF, seg)
        hi = fmax_fold(-INF, seg)
        rng = f32(hi - lo)
        sub_scale.append(f32(rng / 15) if rng > F16_MIN_NORMAL else F16_MIN_NORMAL)
        sub_min.append(-lo if -lo > 0.0 else 0.0)  # fmax(-lo, 0); lo is never NaN
    max_scale = fmax_fold(0.0, sub_scale)
    max_min = fmax_fold(0.0, sub_min)
    d = f32(max_scale / 63) if max_scale > F16_MIN_NORMAL else F16_MIN_NORMAL
    dmin = f32(max_min / 63) if max_min > F16_MIN_NORMAL else F16_MIN_NORMAL
    sc = [round_clamp(f32(s / d), 0, 63) for s in sub_scale]
    mn = [round_clamp(f32(m / dmin), 0, 63) for m in sub_min]
    out = bytearray(struct.pack("<HH", f32_bits_to_f16(f32_to_bits(d)),
                                f32_bits_to_f16(f32_to_bits(dmin))))
    for i in range(4):  # 6-bit scale/min packing [Q §5.4.1]
        out.append((sc[i] & 63) | ((sc[i + 4] & 0x30) << 2))
    for i in range(4):
        out.append((mn[i] & 63) | ((mn[i + 4] & 0x30) << 2))
    for i in range(4):
        out.append((sc[i + 4] & 0x0F) | ((mn[i + 4] & 0x0F) << 4))
    codes = []
    for j in range(8):
        s = f32(d * sc[j])     # products with the UNROUNDED d and dmin (quirk 1)
        o = f32(dmin * mn[j])
        seg = x[32 * j:32 * j + 32]
        if s > EPS:
            codes.append([round_clamp(t, 0, 15) for t in f32_all(
                [t / s for t in f32_all([v + o for v in seg])])])
        else:
            codes.append([0] * 32)
    for c in range(4):
        lo_codes, hi_codes = codes[2 * c], codes[2 * c + 1]
        out += bytes(lo_codes[l] | (hi_codes[l] << 4) for l in range(32))
    return bytes(out)


def q6k_superblock(x):
    """One 256-value Q6_K super-block [Q §5.5] (never produced by import; self-test only)."""
    sub_scale = []
    for j in range(16):
        ma = fmax_fold(0.0, (abs(v) for v in x[16 * j:16 * j + 16]))
        sub_scale.append(f32(ma / 31) if ma > F16_MIN_NORMAL else F16_MIN_NORMAL)
    max_scale = fmax_fold(0.0, sub_scale)
    d = f32(max_scale / 127) if max_scale > F16_MIN_NORMAL else F16_MIN_NORMAL
    sc = [round_clamp(f32(s / d), -127, 127) for s in sub_scale]
    v6 = []
    for j in range(16):
        s = f32(d * sc[j])
        inv = f32(1 / s) if abs(s) > EPS else 0.0  # reciprocal, then multiply
        v6 += [round_clamp(f32(v * inv), -32, 31) + 32 for v in x[16 * j:16 * j + 16]]
    ql, qh = bytearray(128), bytearray(64)
    for h in range(2):
        n = 128 * h
        for l in range(32):
            a, b, c, e = v6[n + l], v6[n + l + 32], v6[n + l + 64], v6[n + l + 96]
            ql[64 * h + l] = (a & 15) | ((c & 15) << 4)
            ql[64 * h + l + 32] = (b & 15) | ((e & 15) << 4)
            qh[32 * h + l] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)
    return (bytes(ql) + bytes(qh) + bytes(s & 0xFF for s in sc)
            + struct.pack("<H", f32_bits_to_f16(f32_to_bits(d))))


def kquant_matrix(x, shape, superblock):
    """Row-padded for 2-D shapes, flat otherwise; padding is +0.0 [Q §5.4.3, §5.4.5]."""
    if len(shape) == 2:
        rows, cols = shape
        spr = -(-cols // 256)
        pad = [0.0] * (spr * 256 - cols)
        out = []
        for r in range(rows):
            row = x[r * cols:(r + 1) * cols] + pad
            out += [superblock(row[256 * b:256 * b + 256]) for b in range(spr)]
        return b"".join(out)
    out = []
    for k in range(0, len(x), 256):
        block = x[k:k + 256]
        out.append(superblock(block + [0.0] * (256 - len(block))))
    return b"".join(out)


def encode_q4k(x, shape):
    return kquant_matrix(x, shape, q4k_superblock)


def encode_q6k(x, shape):
    return kquant_matrix(x, shape, q6k_superblock)


# ======================================================================================
# FP8 E4M3 -> BF16 [Q §9.3, §9.4]
# ======================================================================================

def e4m3_value(byte):
    """safetensors F8_E4M3 (= float8_e4m3fn): bias 7, no infinities, 0x7F/0xFF NaN [Q §9.3]."""
    sign = -1.0 if byte & 0x80 else 1.0
    e, m = (byte >> 3) & 15, byte & 7
    if e == 15 and m == 7:
        return math.copysign(NAN, sign)
    if e == 0:
        return sign * (m / 8) * 2.0 ** -6
    return sign * (1 + m / 8) * 2.0 ** (e - 7)


E4M3 = [e4m3_value(b) for b in range(256)]


def ue8m0_scale(byte):
    """The 'ue8m0' scale variant: s = 2^(byte-127) [Q §9.4] (byte 255 overflows to +Inf)."""
    return f32(2.0 ** (byte - 127))


def dequant_fp8_to_bf16(weight, rows, cols, scales, block):
    """BF16 bytes of W[r,c] * SI[r/bR, c/bC], one binary32 multiply then RNE [Q §9.4]."""
    b_rows, b_cols = block
    n_tile_cols = -(-cols // b_cols)
    tile_of_col = [c // b_cols for c in range(cols)]
    out = array.array("H")
    for r in range(rows):
        row_scales = scales[(r // b_rows) * n_tile_cols:(r // b_rows + 1) * n_tile_cols]
        products = array.array("f", [E4M3[w] * row_scales[t] for w, t in
                                     zip(weight[r * cols:(r + 1) * cols], tile_of_col)])
        bits = array.array("I")
        bits.frombytes(products.tobytes())
        out.extend(f32_bits_to_bf16(b) for b in bits)
    return le(out)


# ======================================================================================
# JSON spelling of serde_json [C §4.5]
# ======================================================================================

def json_str(text):
    """serde_json string escapes: \\" \\\\ \\b \\t \\n \\f \\r, other controls \\u00xx, rest raw."""
    out = ['"']
    for ch in text:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif c < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(c, "\\u%04x" % c))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def nearest_f32(q):
    """The binary32 nearest to the positive rational q (ties to even), exactly; may be Inf."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1  # now 2^e <= q < 2^(e+1)
    e = max(e, -126)  # below the normal range the step is fixed (subnormals)
    scaled = q / Fraction(2) ** (e - 23)
    m = scaled.numerator // scaled.denominator
    rest = scaled - m
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and m & 1):
        m += 1
    value = Fraction(m) * Fraction(2) ** (e - 23)
    return INF if value >= Fraction(2) ** 128 else float(value)


def shortest_f32_digits(x):
    """(digits, k) with x == f32(digits * 10^k), digits as short as possible (Ryu), x > 0."""
    exact = Fraction(x)
    for p in range(1, 10):
        mantissa, exp = ("%.*e" % (p - 1, x)).split("e")
        d = int(mantissa.replace(".", ""))
        k = int(exp) - (p - 1)
        found = []
        for cand in (d - 1, d, d + 1):
            value = Fraction(cand) * Fraction(10) ** k
            if cand > 0 and nearest_f32(value) == x:
                found.append((abs(value - exact), cand != d, cand))
        if found:
            digits = str(min(found)[2])
            stripped = digits.rstrip("0")
            return stripped, k + len(digits) - len(stripped)
    raise AssertionError("no shortest form for %r" % x)


def shortest_f64_digits(x):
    """(digits, k) for binary64 x > 0: repr() is the shortest round-trip form."""
    mantissa, _, exp = ("%r" % x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    k = (int(exp) if exp else 0) - len(frac)
    stripped = digits.rstrip("0")
    return stripped, k + len(digits) - len(stripped)


def ryu_text(x, shortest, max_int_digits, min_kk):
    """Ryu's pretty layout as serde_json prints floats; NaN/Inf -> null [C §4.5]."""
    if x != x or x in (INF, -INF):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0.0"
    digits, k = shortest(abs(x))
    length = len(digits)
    kk = length + k
    if k >= 0 and kk <= max_int_digits:
        body = digits + "0" * k + ".0"
    elif 0 < kk <= max_int_digits:
        body = digits[:kk] + "." + digits[kk:]
    elif min_kk < kk <= 0:
        body = "0." + "0" * -kk + digits
    else:
        body = digits[0] + ("." + digits[1:] if length > 1 else "") + "e%d" % (kk - 1)
    return sign + body


def json_f32(x):
    return ryu_text(x, shortest_f32_digits, 13, -6)


def json_f64(x):
    return ryu_text(x, shortest_f64_digits, 16, -5)


def json_array(items, spell):
    return "[" + ",".join(spell(v) for v in items) + "]"


def json_object(pairs):
    """Compact object from (key, already-spelled JSON text) pairs, in the given order."""
    return "{" + ",".join(json_str(k) + ":" + v for k, v in pairs) + "}"


# ======================================================================================
# Reading the model: safetensors [H §7.3], config.json, tokenizer.json
# ======================================================================================

# Bits per element of every safetensors dtype [H §7.3].
ST_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
    "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


def utf8_key(name):
    """Byte-wise (Rust String) ordering."""
    return name.encode("utf-8", "surrogatepass")


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 64


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class StTensor:
    def __init__(self, name, dtype, shape, path, file, begin, nbytes):
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.path = path    # absolute path of the shard
        self.file = file    # shard name relative to the model folder, for messages
        self.begin = begin  # absolute file offset of the data
        self.nbytes = nbytes

    def raw(self):
        with open(self.path, "rb") as f:
            f.seek(self.begin)
            data = f.read(self.nbytes)
        if len(data) != self.nbytes:
            raise BadInput("%s: tensor %r: short read" % (self.file, self.name))
        return data


def read_safetensors(path, file):
    """(__metadata__ dict, {name: StTensor}) validated like the official reader [H §7.3]."""
    def bad(msg):
        raise BadInput("%s: %s" % (file, msg))
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                bad("shorter than 8 bytes")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > 100_000_000 or 8 + n > size:
                bad("header length %d invalid for a file of %d bytes" % (n, size))
            text = f.read(n)
    except OSError as e:
        bad("cannot read: %s" % e)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        bad("header is not valid JSON: %s" % e)
    if not isinstance(header, dict):
        bad("header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        bad("__metadata__ must map strings to strings")
    tensors, spans = {}, []
    for name, info in header.items():
        try:
            dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
            ok = (dtype in ST_DTYPE_BITS and isinstance(shape, list)
                  and all(is_uint(d) for d in shape) and is_uint(b) and is_uint(e) and e >= b)
        except (KeyError, TypeError, ValueError):
            ok = False
        if not ok:
            bad("tensor %r has an invalid entry" % name)
        bits = math.prod(shape) * ST_DTYPE_BITS[dtype]
        if bits % 8 or e - b != bits // 8:
            bad("tensor %r: data_offsets do not match %s %s" % (name, dtype, shape))
        tensors[name] = StTensor(name, dtype, shape, path, file, 8 + n + b, e - b)
        spans.append((b, e))
    end = 0
    for b, e in sorted(spans):
        if b != end:
            bad("tensor data does not tile the buffer at offset %d" % b)
        end = e
    if 8 + n + end != size:
        bad("data ends at %d but the file is %d bytes" % (8 + n + end, size))
    return meta, tensors


def lenient_constant(name):
    """Python's json accepts NaN/Infinity; aprender rewrites them as null/+-1e308."""
    return {"NaN": None, "Infinity": 1e308, "-Infinity": -1e308}[name]


class JsonObject(dict):
    """A JSON object that also keeps every (key, value) pair in file order."""

    def __init__(self, pairs):
        super().__init__(pairs)
        self.pairs = pairs


def read_json_file(path, file):
    try:
        with open(path, "rb") as f:
            obj = json.loads(f.read().decode("utf-8"), object_pairs_hook=JsonObject,
                             parse_constant=lenient_constant)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadInput("%s: not readable JSON: %s" % (file, e))
    if not isinstance(obj, dict):
        raise BadInput("%s: must be a JSON object" % file)
    return obj


# aprender's Architecture enum Debug name for a config `model_type` (lower-cased); else "Auto".
ARCHITECTURE_NAMES = {}
for _variant, _names in (
        ("Qwen2", "qwen2 qwen qwen2.5"), ("Qwen3", "qwen3"), ("Qwen3_5", "qwen3_5 qwen3.5"),
        ("Llama", "llama llama2 llama3 smollm smollm2 granite granite3 nemotron olmo olmo2 "
                  "stablelm stablelm_epoch stablelm_alpha"),
        ("Whisper", "whisper"), ("Bert", "bert"),
        ("Gpt2", "gpt2 starcoder starcoder2 bigcode gpt_bigcode gpt-bigcode"),
        ("Phi", "phi phi3 phi4"), ("GptNeoX", "gpt-neox gpt_neox gptneox pythia"),
        ("Opt", "opt galactica"), ("DeepSeek", "deepseek deepseek_v2 deepseek-v2"),
        ("Gemma", "gemma gemma2 gemma3"), ("Mistral", "mistral mixtral"),
        ("FalconH1", "falcon_h1 falcon-h1 falconh1 falcon3"), ("Mamba", "mamba mamba2"),
        ("Moonshine", "moonshine"), ("OpenElm", "openelm"), ("Rwkv7", "rwkv rwkv7 rwkv-7"),
        ("FalconClassic", "falcon falcon7b falcon40b falcon11b refinedweb")):
    for _name in _names.split():
        ARCHITECTURE_NAMES[_name] = _variant

# rope_type 2 (NEOX) families [C §11]; everything else 0.
NEOX_MODEL_TYPES = {"qwen2", "qwen2.5", "qwen", "qwen3", "qwen3_5", "qwen3.5", "phi", "phi3",
                    "phi4", "gpt-neox", "gpt_neox", "gptneox", "pythia"}


def first_present(cfg, keys):
    """aprender takes the first alias key present, whatever its value."""
    for key in keys:
        if key in cfg:
            return cfg[key]
    return None


def uint_of(cfg, *keys):
    v = first_present(cfg, keys)
    return v if is_uint(v) else None


class ModelConfig:
    """What the importer takes from config.json (the plain view's rules and defaults)."""

    def __init__(self, cfg):
        self.present = cfg is not None
        cfg = cfg or {}
        mt = cfg.get("model_type")
        self.model_type = mt if isinstance(mt, str) else None
        archs = cfg.get("architectures")
        self.hf_architecture = (archs[0] if isinstance(archs, list) and archs
                                and isinstance(archs[0], str) else None)
        self.hidden_size = uint_of(cfg, "hidden_size", "n_embd", "n_embed", "d_model")
        self.num_layers = uint_of(cfg, "num_hidden_layers", "n_layer", "num_layers")
        self.num_heads = uint_of(cfg, "num_attention_heads", "n_head", "num_heads")
        self.num_kv_heads = uint_of(cfg, "num_key_value_heads")
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        self.vocab_size = uint_of(cfg, "vocab_size")
        self.intermediate_size = uint_of(cfg, "intermediate_size", "n_inner", "ffn_dim")
        if self.intermediate_size is None and self.hidden_size is not None:
            self.intermediate_size = 4 * self.hidden_size
        self.max_position_embeddings = uint_of(cfg, "max_position_embeddings", "n_positions",
                                               "n_ctx")
        theta = first_present(cfg, ("rope_theta",))
        self.rope_theta = f32(theta) if is_number(theta) else f32(10000.0)
        eps = first_present(cfg, ("rms_norm_eps", "layer_norm_epsilon", "layer_norm_eps"))
        self.rms_norm_eps = f32(eps) if is_number(eps) else f32(1e-6)
        self.rope_type = 2 if self.model_type in NEOX_MODEL_TYPES else 0
        self.head_dim = uint_of(cfg, "head_dim")
        self.num_experts = uint_of(cfg, "num_local_experts", "num_experts", "n_routed_experts")
        self.num_experts_per_tok = uint_of(cfg, "num_experts_per_tok", "num_experts_per_token")
        self.moe_intermediate_size = uint_of(cfg, "moe_intermediate_size")
        self.bos_token_id = uint_of(cfg, "bos_token_id")
        self.eos_token_id = uint_of(cfg, "eos_token_id")
        qc = cfg.get("quantization_config")
        self.fp8_block = qc.get("weight_block_size", [128, 128]) if isinstance(qc, dict) else \
            [128, 128]

    def architecture_name(self):
        if self.model_type is None:
            return "Auto"
        return ARCHITECTURE_NAMES.get(self.model_type.lower(), "Auto")


def looks_like_bos(s):
    return "bos" in s or s in ("<s>", "<|startoftext|>")


def looks_like_eos(s):
    return "eos" in s or s in ("</s>", "<|eot_id|>")


def tokenizer_keys(tok, config):
    """The `tokenizer.*` custom keys the plain view embeds, as (key, JSON text) pairs."""
    model = tok.get("model")
    model = model if isinstance(model, dict) else {}
    added = []
    for item in tok.get("added_tokens") if isinstance(tok.get("added_tokens"), list) else []:
        if isinstance(item, dict) and isinstance(item.get("content"), str) and \
                is_uint(item.get("id")):
            added.append((item["id"], item["content"]))
    vocab, vocabulary, scores = model.get("vocab"), [], []
    if isinstance(vocab, JsonObject):
        ids = [(v, k) for k, v in vocab.pairs if is_uint(v)]  # file order; a later one wins
        if ids:
            size = max([config.vocab_size or 0] + [i + 1 for i, _ in ids + added])
            if size > 1 << 24:
                raise BadInput("tokenizer.json: token id %d is beyond 2^24" % (size - 1))
            vocabulary = ["<unk>"] * size
            for i, token in ids + added:
                vocabulary[i] = token
    elif isinstance(vocab, list) and vocab and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and is_number(p[1])
            for p in vocab):
        vocabulary = [p[0] for p in vocab]  # Unigram [[piece, score], ...]
        scores = [float(p[1]) for p in vocab]
    if not vocabulary:
        return []
    merges = []
    for m in model.get("merges") if isinstance(model.get("merges"), list) else []:
        if isinstance(m, str):
            merges.append(m)
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(s, str) for s in m):
            merges.append(m[0] + " " + m[1])
    bos = config.bos_token_id
    if bos is None:
        bos = next((i for i, s in added if looks_like_bos(s)), None)
    eos = config.eos_token_id
    if eos is None:
        eos = next((i for i, s in added if looks_like_eos(s)), None)
    keys = [("tokenizer.vocab_size", str(len(vocabulary))),
            ("tokenizer.vocabulary", json_array(vocabulary, json_str))]
    if merges:
        keys.append(("tokenizer.merges", json_array(merges, json_str)))
    if scores:
        keys.append(("tokenizer.scores", json_array(scores, json_f64)))
    if isinstance(model.get("type"), str):
        keys.append(("tokenizer.model_type", json_str(model["type"])))
    if bos is not None:
        keys.append(("tokenizer.bos_token_id", str(bos)))
    if eos is not None:
        keys.append(("tokenizer.eos_token_id", str(eos)))
    return keys


class Model:
    """A model folder: import path (H or S), shards in iteration order, config, tokenizer."""

    def __init__(self, model_dir):
        self.dir = model_dir
        if not os.path.isdir(model_dir):
            raise BadInput("%s is not a directory" % model_dir)
        index = os.path.join(model_dir, "model.safetensors.index.json")
        weight_map = {}
        if os.path.exists(index):
            self.path = "H"  # [Q §2.4]
            weight_map = self._weight_map(index)
            files = sorted(set(weight_map.values()), key=utf8_key)
        elif os.path.exists(os.path.join(model_dir, "model.safetensors")):
            self.path = "S"  # [Q §2.3]
            files = ["model.safetensors"]
        else:
            self.path = "H"  # several shards, no index: byte-wise file order
            files = sorted((f for f in os.listdir(model_dir) if f.endswith(".safetensors")),
                           key=utf8_key)
            if not files:
                raise BadInput("%s: no model.safetensors.index.json, model.safetensors or "
                               "*.safetensors" % model_dir)
        self.shards = []  # [(file, __metadata__, {name: StTensor})]
        self.by_name = {}
        for file in files:
            meta, tensors = read_safetensors(os.path.join(model_dir, file), file)
            for name, t in tensors.items():
                if name in self.by_name:
                    raise BadInput("tensor %r is in both %s and %s"
                                   % (name, self.by_name[name].file, file))
                self.by_name[name] = t
            self.shards.append((file, meta, tensors))
        for name, file in weight_map.items():
            if name not in self.by_name or self.by_name[name].file != file:
                raise BadInput("model.safetensors.index.json: tensor %r is mapped to %s, which "
                               "does not hold it" % (name, file))
        cfg_path = os.path.join(model_dir, "config.json")
        self.config = ModelConfig(read_json_file(cfg_path, "config.json")
                                  if os.path.exists(cfg_path) else None)
        tok_path = os.path.join(model_dir, "tokenizer.json")
        self.tokenizer = (tokenizer_keys(read_json_file(tok_path, "tokenizer.json"), self.config)
                          if os.path.exists(tok_path) else [])

    @staticmethod
    def _weight_map(index):
        weight_map = read_json_file(index, "model.safetensors.index.json").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise BadInput("model.safetensors.index.json: no weight_map")
        for name, file in weight_map.items():
            parts = file.split("/") if isinstance(file, str) else [""]
            if any(p in ("", ".", "..") for p in parts):  # also catches an absolute path
                raise BadInput("model.safetensors.index.json: tensor %r maps to unsafe path %r"
                               % (name, file))
        return weight_map

    def iteration_order(self):
        """Tensors in the path's order: H = shards in order, names sorted in each, '__'
        names skipped [Q §2.4]; S = all names sorted [Q §2.3]."""
        if self.path == "S":
            return [self.by_name[n] for n in sorted(self.by_name, key=utf8_key)]
        return [tensors[n] for _, _, tensors in self.shards
                for n in sorted(tensors, key=utf8_key) if not n.startswith("__")]


# ======================================================================================
# FP8 companions [Q §9.2, §9.4]
# ======================================================================================

FP8_SCALE_DTYPES = ("F32", "F8_E8M0", "U8")


def fp8_plan(model, order):
    """{weight name: scale StTensor} of the F8_E4M3 weights; refuses a malformed pair."""
    plan = {}
    block = None
    for t in order:
        if t.dtype != "F8_E4M3":
            continue
        where = "%s, tensor %r: " % (t.file, t.name)
        scale = model.by_name.get(t.name + "_scale_inv")
        if scale is None:
            raise Refusal(where + "F8_E4M3 weight without its %r companion (FP8 dequantization "
                          "needs the block scales, apr-quantization.md §9.2)"
                          % (t.name + "_scale_inv"))
        if len(t.shape) != 2:
            raise Refusal(where + "F8_E4M3 weight of shape %s is not 2-D (block-scaled FP8 "
                          "weights are matrices, §9.2)" % t.shape)
        if scale.dtype not in FP8_SCALE_DTYPES:
            raise Refusal("%s, tensor %r: FP8 scale dtype %s (want F32, or F8_E8M0/U8 for ue8m0, "
                          "§9.4)" % (scale.file, scale.name, scale.dtype))
        if block is None:
            block = fp8_block_size(model.config)
        want = [-(-t.shape[0] // block[0]), -(-t.shape[1] // block[1])]
        if scale.shape != want:
            raise Refusal("%s, tensor %r: FP8 scale shape %s, want %s for weight %r %s with "
                          "%dx%d blocks (§9.2)" % (scale.file, scale.name, scale.shape, want,
                                                   t.name, t.shape, block[0], block[1]))
        plan[t.name] = scale
    return plan, block


def fp8_block_size(config):
    b = config.fp8_block
    if not (isinstance(b, list) and len(b) == 2 and all(is_uint(x) and x > 0 for x in b)):
        raise Refusal("config.json: quantization_config.weight_block_size %s is not two "
                      "positive integers (§9.2)" % json.dumps(b))
    return b


def fp8_scales(scale):
    raw = scale.raw()
    if scale.dtype == "F32":
        return from_le("f", raw).tolist()
    return [ue8m0_scale(b) for b in raw]


# ======================================================================================
# Source tensors as f32 [Q §3.1] and the dispatch [Q §3.2, §3.3]
# ======================================================================================

class Source:
    """One emitted source tensor: its effective dtype (FP8 counts as BF16) and bytes."""

    def __init__(self, t, fp8_scale=None, block=None):
        self.t = t
        self.name, self.shape, self.file = t.name, t.shape, t.file
        self.dtype = "BF16" if fp8_scale is not None else t.dtype
        self._scale, self._block = fp8_scale, block

    def raw(self):
        if self._scale is None:
            return self.t.raw()
        rows, cols = self.t.shape
        return dequant_fp8_to_bf16(self.t.raw(), rows, cols, fp8_scales(self._scale),
                                   self._block)

    def f32_bits(self):
        """The exact f32 widening as LE bytes; other dtypes abort the import [Q §3.1]."""
        raw = self.raw()
        if self.dtype == "F32":
            return raw
        if self.dtype == "BF16":  # bits << 16
            out = bytearray(2 * len(raw))
            out[2::4], out[3::4] = raw[0::2], raw[1::2]
            return bytes(out)
        if self.dtype == "F16":
            table = f16_widen_table()
            return le(array.array("I", [table[h] for h in from_le("H", raw)]))
        raise Refusal("%s, tensor %r: dtype %s cannot be converted to f32 (aprender's import "
                      "fails: \"Failed to extract tensor '%s': Unsupported dtype\")"
                      % (self.file, self.name, self.dtype, self.name))


def should_skip(name, n):
    """Newest skip predicate, with the GDN keep-list [Q §3.2]."""
    if any(p in name for p in ("bias", "layernorm", "layer_norm", "norm.weight")):
        return True
    if n < 1024:
        return True
    for seg in name.split("."):
        if "conv1d" in seg or seg in ("A_log", "ssm_a", "dt_bias", "ssm_dt_bias"):
            return True
    return "ssm_dt.bias" in name


def dispatch(view, name, shape, bits):
    """(code, payload) of an f32 tensor for a view [Q §2.3 dispatch_quantize, §3.3]."""
    if view == "f16":
        return F16_CODE, f16_bytes_from_f32_bits(from_le("I", bits))
    if should_skip(name, len(bits) // 4):
        return F32_CODE, bits
    x = from_le("f", bits).tolist()
    if view == "int8":
        return APRQ8_CODE, encode_aprq8(x)
    if view == "int4":
        return APRQ4_CODE, encode_aprq4(x)
    return Q4K_CODE, encode_q4k(x, shape)


def is_head(name):
    return name in ("lm_head.weight", "output.weight")


def is_embedding(name):
    return "embed_tokens.weight" in name or name in ("token_embd.weight", "wte.weight")


def sources(model):
    """The emitted source tensors in iteration order: FP8 weights dequantized, their
    `_scale_inv` companions consumed [Q §9.4]."""
    order = model.iteration_order()
    plan, block = fp8_plan(model, order)
    consumed = {s.name for s in plan.values()}
    return [Source(t, plan.get(t.name), block) for t in order if t.name not in consumed]


# ======================================================================================
# Path H: streaming sharded import [Q §2.4]
# ======================================================================================

def build_path_h(model, view, stem):
    tensors = []  # (name, code, shape, payload) in insertion (= data) order
    has_head, embedding = False, None
    for s in sources(model):
        has_head = has_head or is_head(s.name)
        if is_embedding(s.name):
            embedding = s  # the last one wins
        if view == "f16" and s.dtype in ("F16", "BF16"):
            tensors.append((s.name, F16_CODE if s.dtype == "F16" else BF16_CODE, s.shape,
                            s.raw()))  # raw passthrough
            continue
        tensors.append((s.name,) + reshape(dispatch(view, s.name, s.shape, s.f32_bits()),
                                           s.shape))
    if not has_head and embedding is not None:
        tensors.append(("lm_head.weight",) + reshape(
            dispatch(view, "lm_head.weight", embedding.shape, embedding.f32_bits()),
            embedding.shape))
    c = model.config
    fields = common_fields(c, c.architecture_name(), stem, 0)
    return metadata_text(fields, sorted(model.tokenizer, key=lambda kv: utf8_key(kv[0]))), tensors


def reshape(code_payload, shape):
    return code_payload[0], shape, code_payload[1]


def common_fields(c, model_type, stem, param_count):
    """Typed metadata fields up to rms_norm_eps, in AprV2Metadata order [C §4.2]. Without
    config.json (`apr import --allow-no-config`) no config-derived field is written: the
    defaults (rope_theta 10000, ...) belong to aprender's config loader, which does not run."""
    fields = [("model_type", json_str(model_type)), ("name", json_str(stem)),
              ("license", "null"), ("data_source", "null"), ("data_license", "null"),
              ("total_size", "0"), ("param_count", str(param_count))]
    if not c.present:
        return fields
    for key, value in (("architecture", c.model_type), ("hf_architecture", c.hf_architecture),
                       ("hf_model_type", c.model_type)):
        if value is not None:
            fields.append((key, json_str(value)))
    for key in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "vocab_size",
                "intermediate_size", "max_position_embeddings"):
        if getattr(c, key) is not None:
            fields.append((key, str(getattr(c, key))))
    fields += [("rope_theta", json_f32(c.rope_theta)), ("rope_type", str(c.rope_type)),
               ("rms_norm_eps", json_f32(c.rms_norm_eps))]
    return fields


def metadata_text(fields, custom):
    return json_object(fields + custom).encode("utf-8", "surrogatepass")


# ======================================================================================
# Path S: single-file import [Q §2.3]
# ======================================================================================

def validate_values(s, bits):
    """validate_tensor_values: NaN, +-Inf, |mean of finite values| > 100 abort [Q §3.1]."""
    x = from_le("f", bits).tolist()
    total = 0.0
    for v in x:  # sequential binary64 sum (not math.fsum, not 3.12's compensated sum())
        total += v
    if total - total == 0:  # finite: no NaN or Inf element
        if x and abs(total / len(x)) > 100:
            raise Refusal("%s, tensor %r: |mean| = %s > 100 (aprender's import refuses such "
                          "values with --quantize)" % (s.file, s.name, abs(total / len(x))))
        return
    rule = "NaN" if any(v != v for v in x) else "Inf"
    raise Refusal("%s, tensor %r: contains %s (aprender's import refuses NaN/Inf with "
                  "--quantize)" % (s.file, s.name, rule))


def tie_lm_head(loaded):
    """resolve_f32_tied_embeddings [Q §3.4]; loaded: {name: (shape, f32 bits)}.
    Returns True when custom.tied_embeddings is set."""
    head = loaded.get("lm_head.weight")
    if head is not None:
        bits = head[1]
        n = len(bits) // 4
        zeros = sum(1 for v in from_le("f", bits) if v == 0.0)
        if n and zeros * 1000 < n * 999:
            return False
    src = next((name for name in sorted(loaded, key=utf8_key) if is_embedding(name)), None)
    if src is not None:
        loaded["lm_head.weight"] = loaded[src]
    return "lm_head.weight" in loaded


def build_path_s(model, view, stem):
    loaded = {}  # name -> (shape, f32 bits), every tensor loaded as f32 and validated
    for s in sources(model):
        bits = s.f32_bits()
        validate_values(s, bits)
        loaded[s.name] = (s.shape, bits)
    tied = tie_lm_head(loaded)
    file = model.shards[0][0]
    tensors = []
    for name in sorted(loaded, key=utf8_key):  # in-memory writer: data in name order
        shape, bits = loaded[name]
        code, payload = dispatch(view, name, shape, bits)
        if code == APRQ4_CODE:
            check_q4_density(file, name, payload, len(bits) // 4)
        tensors.append((name, code, shape, payload))
    c = model.config
    fields = common_fields(c, "Auto", stem, sum(math.prod(t[2]) for t in tensors))
    for key in ("head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if getattr(c, key) is not None:
            fields.append((key, str(getattr(c, key))))
    custom = list(model.tokenizer)
    meta = model.shards[0][1]
    if meta:
        custom.append(("source_metadata", json_object(
            [(k, json_str(meta[k])) for k in sorted(meta, key=utf8_key)])))
    custom.append(("tensor_shapes", json_object(
        [(t[0], json_array(t[2], str)) for t in tensors])))
    if tied:
        custom.append(("tied_embeddings", "true"))
    return metadata_text(fields, sorted(custom, key=lambda kv: utf8_key(kv[0]))), tensors


def check_q4_density(file, name, payload, n):
    """The in-memory writer panics when > 99 % of a >= 1024-element tensor's nibbles are 8
    [Q §5.3, §10 item 4]."""
    if n < 1024:
        return
    eights = aprq4_nibble_eights(payload, n)
    if eights / n > 0.99:
        raise Refusal("%s, tensor %r: Q4 DENSITY VIOLATION: %d of %d AprQ4 nibbles are 8 "
                      "(> 99 %%); aprender's in-memory writer panics (single-file int4 import)"
                      % (file, name, eights, n))


# ======================================================================================
# The APR v2 container [C §2-§8]
# ======================================================================================

def align64(x):
    return (x + 63) & ~63


def apr_file(metadata, tensors):
    """Whole file: data in list order, index sorted by name (stable), 64-byte padding, footer
    CRC32 [C §2, §3, §5, §7, §8]. tensors: (name, code, shape, payload)."""
    offsets, pos = [], 0
    for _, _, _, payload in tensors:
        offsets.append(pos)
        pos += align64(len(payload))
    index = bytearray()
    for i in sorted(range(len(tensors)), key=lambda i: utf8_key(tensors[i][0])):
        name, code, shape, payload = tensors[i]
        raw_name = utf8_key(name)
        if len(raw_name) > 256 or len(shape) > 8:
            raise BadInput("tensor %r: name over 256 bytes or more than 8 dims (aprender "
                           "would truncate it silently; not supported)" % name)
        index += struct.pack("<H", len(raw_name)) + raw_name + struct.pack("<BB", code, len(shape))
        index += struct.pack("<%dQ" % len(shape), *shape)
        index += struct.pack("<QQ", offsets[i], len(payload))
    index_off = 64 + align64(len(metadata))
    data_off = index_off + align64(len(index))
    head = struct.pack("<4sBBHIQIQQ", b"APR\x00", 2, 0, 0x0400, len(tensors), 64, len(metadata),
                       index_off, data_off) + bytes(24)  # checksum field, reserved
    crc = zlib.crc32(head[:40] + head[44:])  # the checksum field cut out [C §3.4]
    out = bytearray(head[:40] + struct.pack("<I", crc) + head[44:])
    for part in (metadata, bytes(index)):
        out += part + bytes(align64(len(part)) - len(part))
    for _, _, _, payload in tensors:
        out += payload + bytes(align64(len(payload)) - len(payload))
    out += struct.pack("<I", zlib.crc32(out))
    return bytes(out)


def build_view(model_dir, view, stem):
    model = Model(model_dir)
    build = build_path_h if model.path == "H" else build_path_s
    return apr_file(*build(model, view, stem))


def write_atomically(path, data):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".apr_views-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


# ======================================================================================
# Self-test: the worked examples of the specs, then the decision table on tiny models
# ======================================================================================

def hexb(text):
    return bytes.fromhex(text.replace(" ", "").replace("\n", ""))


# [Q §6.4], [Q §6.5], [Q §6.6]: whole super-blocks.
Q4K_RAMP = """
33 10 10 28 ff ff ff ff 3f 2f 1f 10 0f 0f 0f 0f 00 00 11 11 22 22 33 33 44 44 55 55 66 66 77 77
78 88 89 99 9a aa ab bb bc cc cd dd de ee ef ff 00 10 10 21 21 32 32 43 43 54 54 65 65 76 76 87
87 88 98 99 a9 aa ba bb cb cc dc dd ed ee fe ff f0 f0 f1 f1 f2 f2 f3 f3 f4 f4 f5 f5 f6 f6 f7 f7
f8 f8 f9 f9 fa fa fb fb fc fc fd fd fe fe ff ff""" + " ff" * 32
Q4K_WAVE = """
e8 06 78 12 ff ff ff ff ff ff ff ff ff ff ef ef 27 5a 8d ae df ef fd fb d9 b6 94 61 30 10 01 02
15 38 5a 8d ae df ef fd fb d9 b6 93 61 30 10 01 10 01 03 15 38 5a 8d be df ef fd fb d9 b6 93 61
30 10 01 03 15 38 5a 8d be df ef fd fb d9 b6 93 b6 83 61 30 10 01 03 15 38 5b 8d be df ef fd fb
d8 b6 83 61 30 10 01 03 15 38 5b 8d be df ef fd ee fd eb d8 b5 83 51 30 10 01 03 15 38 5b 8d be
df ee fd eb d8 b5 83 51 30 10 01 03 15 38 5b 8d"""
Q6K_RAMP = """
11 21 21 32 32 42 42 53 53 63 63 74 74 74 84 85 11 21 32 32 42 42 53 63 63 73 84 84 94 a5 a5 b5
11 21 32 42 52 63 73 83 94 a4 b4 c4 d5 e5 f5 06 11 31 52 72 92 b3 d3 f4 14 34 45 65 86 a6 c6 e7
90 a2 a4 a6 b8 ba cc ce c0 d2 d5 e7 e9 eb fd ff a0 b1 b2 b3 b4 c5 c6 c7 d8 d9 da eb ec ed fe ff
b5 b6 b6 c7 c8 c8 d9 da da db eb ec ed ed fe ff b7 c8 c8 c9 c9 da da db db ec ec ed ed fe fe ff
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 40 00 00 00 00 00 00 00 00 40 40 40 40 40 40 40 40
fe fe fe fe fe fe fe fe ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff
7f 6f 5f 4f 40 30 20 10 0f 1f 2f 3f 4e 5e 6e 7e 29 10"""
# [Q §6.7] block headers of Q4_K m[3, 300].
Q4K_M_HEADERS = """
c6 02 33 0d bf fd f6 ed ff bb ff db f6 31 f9 de c6 02 34 0d 3f 1e 01 01 3f 00 00 00 01 01 01 01
c6 02 33 0d e8 f3 fb bf ff e7 ff fe ff fd 07 fe 9e 01 2f 0d 3f 36 02 02 0b 3f 00 00 02 02 02 02
c6 02 34 0d bf fc f6 ec 3f ff ed ff f7 f2 5a fe c6 02 32 0d 3f 1e 01 01 3f 3c 00 00 01 01 01 01"""
# [C §12] the whole 452-byte file.
C12_FILE = """
4150 5200 0200 0004 0200 0000 4000 0000 0000 0000 6a00 0000 c000 0000 0000 0000
4001 0000 0000 0000 3b29 afb6 0000 0000 0000 0000 0000 0000 0000 0000 0000 0000
7b22 6d6f 6465 6c5f 7479 7065 223a 2274 6573 7422 2c22 6c69 6365 6e73 6522 3a6e
756c 6c2c 2264 6174 615f 736f 7572 6365 223a 6e75 6c6c 2c22 6461 7461 5f6c 6963
656e 7365 223a 6e75 6c6c 2c22 746f 7461 6c5f 7369 7a65 223a 302c 2270 6172 616d
5f63 6f75 6e74 223a 307d""" + " 00" * 22 + """
0400 6269 6173 0001 0300 0000 0000 0000 0000 0000 0000 0000 0c00 0000 0000 0000
0600 7765 6967 6874 0002 0200 0000 0000 0000 0300 0000 0000 0000 4000 0000 0000
0000 1800 0000 0000 0000""" + " 00" * 54 + """
0000 003f 0000 80bf 0000 0040""" + " 00" * 52 + """
0000 803f 0000 0040 0000 4040 0000 8040 0000 a040 0000 c040""" + " 00" * 40 + """
890e 30e7"""


class Checks:
    def __init__(self):
        self.failed = []
        self.count = 0

    def eq(self, what, got, want):
        self.count += 1
        if got != want:
            show = (lambda v: v.hex(" ") if isinstance(v, (bytes, bytearray)) else repr(v))
            self.failed.append("%s:\n    got  %s\n    want %s" % (what, show(got)[:400],
                                                                show(want)[:400]))

    def sha(self, what, data, size, digest):
        self.eq(what + " size", len(data), size)
        self.eq(what + " sha256", hashlib.sha256(data).hexdigest(), digest)


def selftest_vectors():
    """The §6 inputs, regenerated exactly as [Q §6.0] defines them."""
    return {
        "ramp": [f32((i - 128) / 64) for i in range(256)],
        "wave": [f32(math.sin(0.37 * i) * 0.05) for i in range(256)],
        "pos": [f32(1 + i / 1024) for i in range(256)],
        "m": [f32(math.cos(0.11 * i) * 0.02) for i in range(900)],
    }


def selftest_encoders(ck):
    v = selftest_vectors()
    ck.eq("§4.1 F16_MIN_NORMAL bits", f32_to_bits(F16_MIN_NORMAL), 0x387FDA40)
    ck.eq("§4.1 EPS bits", f32_to_bits(EPS), 0x2EDBE6FF)
    eight = [0.5, -1, 0.25, 2, -0.75, 0, 1.5, -2]
    ck.eq("§6.1 AprQ8", encode_aprq8(eight), hexb("04 02 81 3c 20 c0 10 7f d0 00 5f 81"))
    ck.eq("§6.2 AprQ4", encode_aprq4(eight), hexb("92 34 5a f9 85 1d") + bytes(12))
    ck.eq("§6.2 AprQ4 ramp[0..31]", encode_aprq4(v["ramp"][:32]),
          hexb("92 34 11 11 11 11 11 22 22 22 22 22 22 22 22 22 33 33"))
    ck.eq("§5.2 AprQ8 all zero", encode_aprq8([0.0] * 3), hexb("00 00 80 3f 00 00 00"))
    ck.eq("§5.3 AprQ4 all-zero block", encode_aprq4([0.0] * 32), hexb("00 3c") + b"\x88" * 16)
    zero_q4k = hexb("ff 03 ff 03 01 01 01 01 00 00 00 00 01 01 01 01") + bytes(128)
    ck.eq("§6.3 Q4_K zeros", encode_q4k([0.0] * 256, [256]), zero_q4k)
    ck.eq("§6.3 Q6_K zeros", encode_q6k([0.0] * 256, [256]),
          bytes(128) + b"\xaa" * 64 + b"\x01" * 16 + hexb("ff 03"))
    ck.eq("§6.4 Q4_K ramp", encode_q4k(v["ramp"], [256]), hexb(Q4K_RAMP))
    ck.eq("§6.5 Q4_K wave", encode_q4k(v["wave"], [256]), hexb(Q4K_WAVE))
    ck.eq("§6.5 Q4_K pos", encode_q4k(v["pos"], [256]),
          hexb("19 02 ff 03 ff ff ff ff 00 00 00 00 0f 0f 0f 0f") + b"\xff" * 128)
    ck.eq("§6.6 Q6_K ramp", encode_q6k(v["ramp"], [256]), hexb(Q6K_RAMP))
    m = v["m"]
    rows = encode_q4k(m, [3, 300])
    ck.sha("§6.7 Q4_K [3,300]", rows, 864,
           "200c34f058243d670c27cddc7af4378c960301812fab146b502fdcdc4eb1366a")
    ck.eq("§6.7 Q4_K [3,300] block headers", b"".join(rows[144 * k:144 * k + 16]
                                                        for k in range(6)), hexb(Q4K_M_HEADERS))
    ck.sha("§6.7 Q4_K flat [900]", encode_q4k(m, [900]), 576,
           "0f0522ff6705ccf27af0190ac7cf1827d06c5b1372f94fd3119e3edd6c548518")
    ck.sha("§6.7 Q6_K [3,300]", encode_q6k(m, [3, 300]), 1260,
           "23a7ebe88d41e06294511c9d2671751e1ffbf5e3e662215a449995be4d974eba")
    q8 = encode_aprq8(m)
    ck.sha("§6.7 AprQ8 [900]", q8, 904,
           "8658890a797cfd1cf6a3e82a52c1e2565a0e6109bdded2a827263ec28b6cc1a3")
    ck.eq("§6.7 AprQ8 start", q8[:8], hexb("4d 21 25 39 7f 7e 7c 78"))
    q4 = encode_aprq4(m)
    ck.sha("§6.7 AprQ4 [900]", q4, 522,
           "c84b7a4116440f49796a0cc1355bfbc9d467a06c7a36f7a64018f4b12956c83b")
    ck.eq("§6.7 AprQ4 first block", q4[:18],
          hexb("da 19 ff ff ee de cc ab 9a 78 67 55 34 23 22 11 11 11"))
    ck.eq("§6.7 AprQ4 last block", q4[-18:], hexb("8f 14 31 75") + bytes(14))
    ck.sha("§6.7 F16 [900]", f16_bytes_from_f32_bits([f32_to_bits(x) for x in m]), 1800,
           "91a6c2604975f9f3880f123714db1aa64c66712623dcbceaf02224ce08fb3ff6")
    ck.eq("§4.3 AprQ8 with NaN", encode_aprq8([1.0, NAN, -0.5]), hexb("04 02 01 3c 7f 00 c0"))
    ck.eq("§4.3 AprQ8 with +Inf", encode_aprq8([1.0, INF, -0.5]), hexb("00 00 80 7f 00 00 00"))


def selftest_f16(ck):
    spots = [(f32_to_bits(f32(1 / 3)), 0x3555), (f32_to_bits(65504.0), 0x7BFF),
             (f32_to_bits(65519.0), 0x7BFF), (f32_to_bits(65520.0), 0x7C00),
             (f32_to_bits(2.0 ** -25), 0x0000), (f32_to_bits(f32(3e-8)), 0x0001),
             (f32_to_bits(F16_MIN_NORMAL), 0x03FF), (0x3F81 << 16, 0x3C08),
             (0x477F << 16, 0x7BF8), (0x4780 << 16, 0x7C00)]
    for bits, want in spots:
        ck.eq("§4.4 f32_to_f16(0x%08x)" % bits, f32_bits_to_f16(bits), want)
    # Cross-checks against CPython's own binary16 codec (struct 'e', RNE) on non-NaN values.
    bad = [h for h in range(65536) if (h & 0x7C00) != 0x7C00 and
           bits_to_f32(f16_to_f32_bits(h)) != struct.unpack("<e", struct.pack("<H", h))[0]]
    ck.eq("§3.1 f16 widening of every finite half", bad, [])
    ck.eq("§3.1 f16 NaN payload kept", f16_to_f32_bits(0xFE01), 0xFFC02000)
    state, bad = 12345, []
    for _ in range(20000):  # finite f32 bit patterns in and around the f16 range
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        bits = (state >> 32) & 0x8FFFFFFF | (0x30000000 if state & 1 else 0x38000000)
        x = bits_to_f32(bits)
        try:
            want = struct.unpack("<H", struct.pack("<e", x))[0]
        except OverflowError:
            want = (bits >> 16) & 0x8000 | 0x7C00
        if f32_bits_to_f16(bits) != want:
            bad.append(hex(bits))
    ck.eq("§4.4 f32_to_f16 vs struct 'e' on 20000 values", bad[:5], [])


def selftest_fp8(ck):
    ck.eq("§9.4 E4M3 decoding", [E4M3[b] for b in hexb("00 38 40 7e c4 01 08 fe")],
          [0.0, 1.0, 2.0, 448.0, -3.0, 2.0 ** -9, 2.0 ** -6, -448.0])
    ck.eq("§9.3 E4M3 NaN bytes", [E4M3[0x7F] != E4M3[0x7F], E4M3[0xFF] != E4M3[0xFF]],
          [True, True])
    out = dequant_fp8_to_bf16(hexb("00 38 40 7e c4 01 08 fe"), 1, 8, [f32(0.0123)], [128, 128])
    ck.eq("§9.4 worked example", list(from_le("H", out)),
          [0x0000, 0x3C4A, 0x3CCA, 0x40B0, 0xBD17, 0x37CA, 0x394A, 0xC0B0])
    # Partial edge tiles: a 3x3 matrix of 1.0 with 2x2 blocks uses scales [[1,2],[3,4]].
    out = dequant_fp8_to_bf16(b"\x38" * 9, 3, 3, [1.0, 2.0, 3.0, 4.0], [2, 2])
    ck.eq("§9.4 edge tiles", [bits_to_f32(h << 16) for h in from_le("H", out)],
          [1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 4.0])
    ck.eq("§9.4 ue8m0 scales", [ue8m0_scale(127), ue8m0_scale(120), ue8m0_scale(255)],
          [1.0, 2.0 ** -7, INF])
    ck.eq("§9.4 bf16 RNE", [f32_bits_to_bf16(0x3F808000), f32_bits_to_bf16(0x3F818000),
                            f32_bits_to_bf16(0x7FC00001)], [0x3F80, 0x3F82, 0x7FC0])


def selftest_json(ck):
    for x, want in ((10000.0, "10000.0"), (1e6, "1000000.0"), (1e12, "1000000000000.0"),
                    (12.34, "12.34"), (1e-5, "0.00001"), (1e-6, "0.000001"),
                    (1.234e-6, "0.000001234"), (1e-7, "1e-7"), (1.234e-7, "1.234e-7"),
                    (1e13, "1e13"), (1.5e13, "1.5e13"), (3.4e38, "3.4e38"), (INF, "null"),
                    (500000.0, "500000.0"), (0.0, "0.0")):
        ck.eq("§4.5 f32 %r" % x, json_f32(f32(x)), want)
    ck.eq("§4.5 f64 widened 1e-6", json_f64(f32(1e-6)), "9.999999974752427e-7")
    ck.eq("§4.5 f64", [json_f64(x) for x in (0.5, -2.0, 1e15, 1e16, 1e-5, 1e-6, 123.25)],
          ["0.5", "-2.0", "1000000000000000.0", "1e16", "0.00001", "1e-6", "123.25"])
    ck.eq("§4.5 string escapes", json_str('a"\\\b\t\n\f\r\x01\x7f/\u00fc'),
          '"a\\"\\\\\\b\\t\\n\\f\\r\\u0001\x7f/\u00fc"')


def selftest_container(ck):
    meta = json_object([("model_type", json_str("test")), ("license", "null"),
                        ("data_source", "null"), ("data_license", "null"),
                        ("total_size", "0"), ("param_count", "0")]).encode()
    weight = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    bias = struct.pack("<3f", 0.5, -1, 2)
    # The in-memory writer sorts by name and writes data in that order.
    data = apr_file(meta, [("bias", F32_CODE, [3], bias), ("weight", F32_CODE, [2, 3], weight)])
    ck.eq("[C §12] worked example file", data, hexb(C12_FILE))


def st_file(path, tensors, metadata=None):
    """A safetensors file for the behaviour tests: tensors = [(name, dtype, shape, bytes)]."""
    header, pos = {"__metadata__": metadata or {"format": "pt"}}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(data)]}
        pos += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


def read_apr(data):
    """(metadata dict, {name: (code, shape, offset, size)}, [names in data order])."""
    count, meta_size, index_off, data_off = struct.unpack_from("<8xI8xIQQ", data)
    meta = json.loads(data[64:64 + meta_size])
    entries, pos = {}, index_off
    for _ in range(count):
        (n,) = struct.unpack_from("<H", data, pos)
        name = data[pos + 2:pos + 2 + n].decode()
        code, ndim = data[pos + 2 + n], data[pos + 3 + n]
        shape = list(struct.unpack_from("<%dQ" % ndim, data, pos + 4 + n))
        offset, size = struct.unpack_from("<QQ", data, pos + 4 + n + 8 * ndim)
        entries[name] = (code, shape, offset, size)
        pos += 20 + n + 8 * ndim
    return meta, entries, sorted(entries, key=lambda k: entries[k][2])


def gauss_f32(seed, n):
    state, out = seed, []
    for _ in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(((state >> 40) / (1 << 24) - 0.5) * 0.1)
    return array.array("f", out)


def bf16_of(values):
    raw = le(array.array("f", values))
    return bytes(b for i in range(0, len(raw), 4) for b in raw[i + 2:i + 4])


def selftest_model(folder, layout, extra=(), lm_head=None):
    """A small LLaMA-like model: BF16 embedding, F32 and F16 matrices, an F32 norm, an FP8
    projection with its F32 scale, in two shards (H) or one model.safetensors (S)."""
    emb = bf16_of(gauss_f32(1, 64 * 32))
    t = [("model.embed_tokens.weight", "BF16", [64, 32], emb),
         ("model.layers.0.mlp.up_proj.weight", "F32", [40, 48], le(gauss_f32(2, 1920))),
         ("model.layers.0.mlp.down_proj.weight", "F16", [32, 40],
          struct.pack("<1280e", *gauss_f32(3, 1280))),
         ("model.norm.weight", "F32", [32], le(array.array("f", [1.0] * 32))),
         ("model.layers.0.self_attn.q_proj.weight", "F8_E4M3", [40, 300],
          bytes((i * 37) % 0x7E for i in range(12000))),
         ("model.layers.0.self_attn.q_proj.weight_scale_inv", "F32", [1, 3],
          struct.pack("<3f", 1e-3, 2e-3, 5e-4))]
    t += list(extra)
    if lm_head is not None:
        t.append(("lm_head.weight", "F32", [64, 32], lm_head))
    if layout == "S":
        st_file(os.path.join(folder, "model.safetensors"), t)
        return
    halves = {"model-00001-of-00002.safetensors": t[:3], "model-00002-of-00002.safetensors": t[3:]}
    weight_map = {}
    for file, part in halves.items():
        st_file(os.path.join(folder, file), part)
        weight_map.update({x[0]: file for x in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                   "hidden_size": 32, "vocab_size": 64, "bos_token_id": 1}, f)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump({"added_tokens": [{"id": 63, "content": "</s>"}],
                   "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}},
                  f)


def refusal_of(folder, view):
    try:
        build_view(folder, view, "m")
    except Refusal as e:
        return str(e)
    return None


def selftest_behaviour(ck):
    q_proj = "model.layers.0.self_attn.q_proj.weight"
    with tempfile.TemporaryDirectory() as tmp:
        h, s = os.path.join(tmp, "h"), os.path.join(tmp, "s")
        os.mkdir(h)
        os.mkdir(s)
        selftest_model(h, "H")
        meta, e, order = read_apr(build_view(h, "f16", "m"))
        ck.eq("H f16 codes", {k: v[0] for k, v in e.items()},
              {"model.embed_tokens.weight": BF16_CODE, "model.layers.0.mlp.up_proj.weight": 1,
               "model.layers.0.mlp.down_proj.weight": 1, "model.norm.weight": 1,
               q_proj: BF16_CODE, "lm_head.weight": 1})
        ck.eq("H data order (shards, then names)", order,
              ["model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight",
               "model.layers.0.mlp.up_proj.weight", q_proj, "model.norm.weight",
               "lm_head.weight"])
        ck.eq("H metadata keys", list(meta),
              ["model_type", "name", "license", "data_source", "data_license", "total_size",
               "param_count", "architecture", "hf_architecture", "hf_model_type", "hidden_size",
               "vocab_size", "intermediate_size", "rope_theta", "rope_type", "rms_norm_eps",
               "tokenizer.bos_token_id", "tokenizer.eos_token_id", "tokenizer.merges",
               "tokenizer.model_type", "tokenizer.vocab_size", "tokenizer.vocabulary"])
        ck.eq("H metadata values", [meta["model_type"], meta["param_count"],
                                    meta["intermediate_size"], meta["tokenizer.vocab_size"],
                                    meta["tokenizer.vocabulary"][62:], meta["tokenizer.merges"],
                                    meta["tokenizer.bos_token_id"]],
              ["Llama", 0, 128, 64, ["<unk>", "</s>"], ["a b"], 1])
        _, e, _ = read_apr(build_view(h, "q4k", "m"))
        ck.eq("H q4k codes and sizes", {k: v[0::3] for k, v in e.items()},
              {"model.embed_tokens.weight": (12, 64 * 144),
               "model.layers.0.mlp.up_proj.weight": (12, 40 * 144),
               "model.layers.0.mlp.down_proj.weight": (12, 32 * 144),
               "model.norm.weight": (0, 128), q_proj: (12, 40 * 2 * 144),
               "lm_head.weight": (12, 64 * 144)})

        selftest_model(s, "S", lm_head=bytes(64 * 32 * 4))
        meta, e, order = read_apr(build_view(s, "f16", "m"))
        ck.eq("S f16 converts every tensor", sorted({v[0] for v in e.values()}), [1])
        ck.eq("S data order = name order", order, sorted(e))
        ck.eq("S zero lm_head tied", [meta.get("tied_embeddings"), meta["model_type"],
                                      meta["param_count"], meta["tensor_shapes"][q_proj]],
              [True, "Auto", 2048 + 1920 + 1280 + 32 + 12000 + 2048, [40, 300]])
        ck.eq("S scale companion consumed", "%s_scale_inv" % q_proj in e, False)
        ck.eq("S metadata keys (no config.json, no tokenizer.json)", list(meta),
              ["model_type", "name", "license", "data_source", "data_license", "total_size",
               "param_count", "source_metadata", "tensor_shapes", "tied_embeddings"])

        nan = le(array.array("f", [NAN] + [0.0] * 1023))
        zero = bytes(4096)
        for folder, layout in ((h, "H"), (s, "S")):
            for name in os.listdir(folder):
                os.unlink(os.path.join(folder, name))
            selftest_model(folder, layout, extra=[("x.nan", "F32", [1024], nan),
                                                  ("x.zero", "F32", [1024], zero)])
        ck.eq("S refuses NaN", "tensor 'x.nan': contains NaN" in (refusal_of(s, "q4k") or ""),
              True)
        ck.eq("H writes NaN", refusal_of(h, "int4"), None)
        ck.eq("Q4 density (H: none)", refusal_of(h, "int4"), None)
        os.unlink(os.path.join(s, "model.safetensors"))
        selftest_model(s, "S", extra=[("x.zero", "F32", [1024], zero)])
        ck.eq("Q4 density (S: refused)",
              "'x.zero': Q4 DENSITY VIOLATION" in (refusal_of(s, "int4") or ""), True)
        ck.eq("Q4 density only for int4", refusal_of(s, "int8"), None)
        os.unlink(os.path.join(s, "model.safetensors"))
        selftest_model(s, "S", extra=[("x.i32", "I32", [4], bytes(16))])
        ck.eq("other dtypes refused", "'x.i32': dtype I32" in (refusal_of(s, "f16") or ""), True)
        os.unlink(os.path.join(s, "model.safetensors"))
        selftest_model(s, "S", extra=[("x.w", "F8_E4M3", [2, 2], bytes(4))])
        ck.eq("FP8 without companion refused",
              "'x.w_scale_inv' companion" in (refusal_of(s, "q4k") or ""), True)


def selftest():
    ck = Checks()
    for part in (selftest_encoders, selftest_f16, selftest_fp8, selftest_json,
                 selftest_container, selftest_behaviour):
        part(ck)
    for f in ck.failed:
        print("FAIL %s" % f)
    print("apr_views self-test: %d checks, %d failed" % (ck.count, len(ck.failed)))
    return 1 if ck.failed else 0


# ======================================================================================
# Driver
# ======================================================================================

def main(argv=None):
    p = argparse.ArgumentParser(
        description="Write the APR view file aprender's `apr import --quantize` would write "
                    "(independent reference).")
    p.add_argument("model_dir", nargs="?", metavar="MODEL_DIR")
    p.add_argument("--view", choices=VIEWS)
    p.add_argument("--name", metavar="STEM", help="metadata name (the output file stem)")
    p.add_argument("-o", "--output", metavar="OUT_FILE")
    p.add_argument("--selftest", action="store_true",
                   help="check the encoders against the specs' worked examples")
    args = p.parse_args(argv)
    if args.selftest:
        return selftest()
    if not (args.model_dir and args.view and args.name and args.output):
        p.error("MODEL_DIR, --view, --name and -o are required (or --selftest)")
    try:
        data = build_view(args.model_dir, args.view, args.name)
        write_atomically(args.output, data)
    except Refusal as e:
        print(str(e), file=sys.stderr)
        return 3
    except (BadInput, OSError) as e:
        print("apr_views: error: %s" % e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
