// Host replacements for the PTX helpers of cu/decode_gemm.cu (the part under
// `#ifndef FP8_HOST_MODEL`). Include after cuda.h and common.h.
#pragma once

inline uint4 ldg_stream(const u8* p) {
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
}
