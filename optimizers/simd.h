// Internal to optimizers/ (and the benchmark): an 8-lane float type and a loop helper, so each
// update rule is written once, as a generic lambda, and compiled both as 8-wide vector code for
// the body and as scalar code for the tail.
//
// Why not plain loops: at -O2 GCC 12 vectorises only loops whose trip count is a multiple of
// the vector width, and std::sqrt keeps its errno branch (-fno-math-errno cannot be set per
// function), so a plain Adam loop stays scalar. GCC vector extensions make the width explicit
// whatever the flags.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace pushpull::opt::simd {

using F8 = float __attribute__((vector_size(32)));
inline constexpr size_t kLanes = 8;

template <class V>
inline V Load(const float* p);
template <>
inline float Load<float>(const float* p) {
  return *p;
}
template <>
inline F8 Load<F8>(const float* p) {
  F8 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load (vmovups)
  return v;
}

inline void Store(float* p, float v) { *p = v; }
inline void Store(float* p, F8 v) { std::memcpy(p, &v, sizeof v); }

inline float Sqrt(float x) { return std::sqrt(x); }
inline F8 Sqrt(F8 x) {
#if defined(__AVX__)
  return _mm256_sqrt_ps(x);
#else
  for (size_t i = 0; i < kLanes; ++i) x[i] = std::sqrt(x[i]);
  return x;
#endif
}

// Element-wise; for F8 the ternary is a lane-wise blend, not a branch.
template <class V>
inline V Max(V a, V b) {
  return a > b ? a : b;
}
template <class V>
inline V Abs(V a) {
  return Max(a, -a);
}

// Calls body(V{}, i) for i = 0, 8, 16, ... with V = F8 while 8 elements remain, then
// body(float{}, i) for each remaining element. The first argument only carries the type.
template <class Body>
inline void ForEach(size_t n, Body&& body) {
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) body(F8{}, i);
  for (; i < n; ++i) body(0.0f, i);
}

}  // namespace pushpull::opt::simd
