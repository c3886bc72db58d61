#include "format/safetensors/dtype.h"

#include <array>

namespace aprfs {
namespace {

struct DtypeRow {
  StDtype dtype;
  std::string_view name;
  unsigned bits;
};

constexpr std::array<DtypeRow, 22> kDtypes{{
    {StDtype::BOOL, "BOOL", 8},
    {StDtype::U8, "U8", 8},
    {StDtype::I8, "I8", 8},
    {StDtype::F8_E5M2, "F8_E5M2", 8},
    {StDtype::F8_E4M3, "F8_E4M3", 8},
    {StDtype::F8_E8M0, "F8_E8M0", 8},
    {StDtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {StDtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {StDtype::I16, "I16", 16},
    {StDtype::U16, "U16", 16},
    {StDtype::F16, "F16", 16},
    {StDtype::BF16, "BF16", 16},
    {StDtype::I32, "I32", 32},
    {StDtype::U32, "U32", 32},
    {StDtype::F32, "F32", 32},
    {StDtype::F64, "F64", 64},
    {StDtype::I64, "I64", 64},
    {StDtype::U64, "U64", 64},
    {StDtype::C64, "C64", 64},
    {StDtype::F4, "F4", 4},
    {StDtype::F6_E2M3, "F6_E2M3", 6},
    {StDtype::F6_E3M2, "F6_E3M2", 6},
}};

const DtypeRow& Row(StDtype dtype) { return kDtypes[static_cast<size_t>(dtype)]; }

}  // namespace

std::optional<StDtype> ParseStDtype(std::string_view name) {
  for (const DtypeRow& row : kDtypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

std::string_view StDtypeName(StDtype dtype) { return Row(dtype).name; }

unsigned StDtypeBits(StDtype dtype) { return Row(dtype).bits; }

std::optional<uint8_t> AprCodeFor(StDtype dtype) {
  switch (dtype) {
    case StDtype::F32: return 0;
    case StDtype::F16: return 1;
    case StDtype::F64: return 3;
    case StDtype::I32: return 4;
    case StDtype::I64: return 5;
    case StDtype::I8: return 6;
    case StDtype::U8: return 7;
    case StDtype::BOOL: return 7;
    case StDtype::BF16: return 30;
    default: return std::nullopt;
  }
}

std::optional<std::string_view> AprDtypeName(uint8_t code) {
  switch (code) {
    case 0: return "F32";
    case 1: return "F16";
    case 3: return "F64";
    case 4: return "I32";
    case 5: return "I64";
    case 6: return "I8";
    case 7: return "U8";
    case 8: return "Q4 (legacy 8)";
    case 9: return "Q8 (legacy 9)";
    case 12: return "Q4K";
    case 14: return "Q6K";
    case 30: return "BF16";
    case 128: return "Q4";
    case 129: return "Q8";
    default: return std::nullopt;
  }
}

}  // namespace aprfs
