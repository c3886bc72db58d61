#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace aprfs {

// Every dtype string of the safetensors spec (hf-hub.md §7.3).
enum class StDtype : uint8_t {
  BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, C64, F4, F6_E2M3, F6_E3M2,
};

std::optional<StDtype> ParseStDtype(std::string_view name);
std::string_view StDtypeName(StDtype dtype);
// Bits per element, as the official library counts them (F4 = 4, F6_* = 6).
unsigned StDtypeBits(StDtype dtype);

// The APR v2 dtype code a safetensors dtype is stored as (apr-v2-format.md §6.1), or nullopt
// when APR has no faithful code for it. BOOL is stored as U8, as aprender does.
std::optional<uint8_t> AprCodeFor(StDtype dtype);

// Name of an APR dtype code as the aprender reader knows it ("F32", "BF16", "Q4K"...), or
// nullopt for a code aprender rejects ("invalid dtype").
std::optional<std::string_view> AprDtypeName(uint8_t code);

}  // namespace aprfs
