#include "format/gguf/sentencepiece_model.h"

#include <cstring>

#include "format/error.h"

namespace aprfs {
namespace {

// A protobuf reader over [at, end) of `bytes`: varints, fixed32, length-delimited fields.
class Protobuf {
 public:
  Protobuf(const std::string& bytes, size_t at, size_t end, const std::string& file)
      : bytes_(bytes), at_(at), end_(end), file_(file) {}

  bool done() const { return at_ >= end_; }
  size_t at() const { return at_; }

  uint64_t Varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ >= end_) Fail("a varint runs past the end of its message");
      const uint8_t b = static_cast<uint8_t>(bytes_[at_++]);
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return value;
    }
    Fail("a varint is longer than 10 bytes");
  }
  uint32_t Fixed32() {
    if (end_ - at_ < 4) Fail("a 32-bit field runs past the end of its message");
    uint32_t v;
    std::memcpy(&v, bytes_.data() + at_, 4);  // little endian, as x86
    at_ += 4;
    return v;
  }
  // The [begin, end) of a length-delimited field's payload, skipped over.
  std::pair<size_t, size_t> Bytes() {
    const uint64_t length = Varint();
    if (length > end_ - at_) Fail("a field of " + std::to_string(length) + " bytes runs past the end");
    const size_t begin = at_;
    at_ += length;
    return {begin, at_};
  }
  void Skip(uint32_t wire_type) {
    switch (wire_type) {
      case 0: Varint(); return;
      case 1:
        if (end_ - at_ < 8) Fail("a 64-bit field runs past the end of its message");
        at_ += 8;
        return;
      case 2: Bytes(); return;
      case 5: Fixed32(); return;
      default: Fail("wire type " + std::to_string(wire_type) + " (groups or invalid)");
    }
  }
  [[noreturn]] void Fail(const std::string& rule) const {
    throw FormatError(file_ + ": not a SentencePiece model: at byte " + std::to_string(at_) + ", " + rule);
  }

 private:
  const std::string& bytes_;
  size_t at_, end_;
  const std::string& file_;
};

SentencePiece ReadPiece(const std::string& bytes, std::pair<size_t, size_t> range, size_t index,
                        const std::string& file) {
  Protobuf in(bytes, range.first, range.second, file);
  SentencePiece piece;
  bool has_text = false;
  while (!in.done()) {
    const uint64_t key = in.Varint();
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    if (field == 1 && wire == 2) {
      auto [begin, end] = in.Bytes();
      piece.piece = bytes.substr(begin, end - begin);
      has_text = true;
    } else if (field == 2 && wire == 5) {
      const uint32_t bits = in.Fixed32();
      std::memcpy(&piece.score, &bits, 4);
    } else if (field == 3 && wire == 0) {
      const uint64_t type = in.Varint();
      if (type < SentencePiece::kNormal || type > SentencePiece::kByte) {
        in.Fail("piece " + std::to_string(index) + " has type " + std::to_string(type) + " (1 to 6)");
      }
      piece.type = static_cast<int32_t>(type);
    } else {
      in.Skip(wire);
    }
  }
  if (!has_text) in.Fail("piece " + std::to_string(index) + " has no text");
  return piece;
}

}  // namespace

std::vector<SentencePiece> ParseSentencePieceModel(const std::string& bytes, const std::string& file) {
  Protobuf in(bytes, 0, bytes.size(), file);
  std::vector<SentencePiece> pieces;
  while (!in.done()) {
    const uint64_t key = in.Varint();
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    if (field == 0) in.Fail("field number 0");
    if (field == 1 && wire == 2) {
      pieces.push_back(ReadPiece(bytes, in.Bytes(), pieces.size(), file));
    } else {
      in.Skip(wire);
    }
  }
  if (pieces.empty()) throw FormatError(file + ": a SentencePiece model without pieces");
  return pieces;
}

}  // namespace aprfs
