#pragma once

#include <string>
#include <string_view>

namespace aprfs {

// JSON text spelled the way Rust's serde_json writes it (apr-v2-format.md §4.5), so that our
// metadata is byte-identical to aprender's: compact, serde's string escapes, Ryu floats.

void AppendJsonString(std::string& out, std::string_view text);
// f32 fields (rope_theta, rms_norm_eps) are printed as the shortest f32 that round-trips.
void AppendJsonF32(std::string& out, float value);
void AppendJsonF64(std::string& out, double value);

}  // namespace aprfs
