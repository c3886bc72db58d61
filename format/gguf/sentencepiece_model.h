#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace aprfs {

// The pieces of a SentencePiece tokenizer.model (a protobuf ModelProto; gguf-view.md §4.3):
// field 1 holds the pieces in id order, each {1: piece, 2: score, 3: type}. Everything else
// (trainer and normalizer specs) is skipped.
struct SentencePiece {
  enum Type : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  std::string piece;
  float score = 0.0f;
  int32_t type = kNormal;  // protobuf's default when the field is absent
};

// Throws FormatError naming `file`, the byte offset and the rule when the bytes are not a
// well-formed protobuf or a piece is malformed.
std::vector<SentencePiece> ParseSentencePieceModel(const std::string& bytes, const std::string& file);

}  // namespace aprfs
