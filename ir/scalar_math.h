// Scalar functions that the elementwise rows of the op table (ir/ops.def) are written in.
//
// This file is both C++ and CUDA: the reference evaluator includes it and instantiates the
// templates with T = double; codegen pastes its text into every generated translation unit
// (after `#define KILN_SCALAR_FN __device__ __forceinline__`), where kernels instantiate them
// with T = float, and the host backend compiles that same text on the CPU. So: no includes
// beyond <cmath> on the host, no std::, only the math overloads that <cmath> and CUDA share.
//
// The forms avoid cancellation and overflow, since float kernels must stay within a few ulp
// of the double evaluator:
//   - sigmoid (kiln_logistic; the device library's kiln_sigmoid is a fast form for other
//     kernels): exp of a non-positive argument, and e/(1+e) for x < 0, where 1/(1+e^-x) would
//     round to 0 early;
//   - softplus: max(x, 0) + log1p(exp(-|x|)), exact for large |x| (no exp overflow);
//   - gelu (erf form): 0.5 x erfc(-x / sqrt 2), since 1 + erf(x / sqrt 2) cancels for x << 0;
//   - gelu (tanh approximation): 0.5 x (1 + tanh(u)) = x sigmoid(2u), and 1 - tanh(u)^2 =
//     4 s (1 - s) with 1 - s computed as sigmoid(-2u) rather than subtracted.
#ifndef KILN_IR_SCALAR_MATH_H
#define KILN_IR_SCALAR_MATH_H

#ifndef KILN_SCALAR_FN
#include <cmath>
#define KILN_SCALAR_FN inline
#endif

// selu's constants (Klambauer et al. 2017, as torch.nn.SELU).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;
constexpr double kTwoOverSqrtPi = 1.1283791670955125738961589031215;
constexpr double kInvSqrt2 = 0.70710678118654752440084436210485;
constexpr double kInvSqrt2Pi = 0.39894228040143267793994605993438;
constexpr double kSqrt2OverPi = 0.79788456080286535587989211986876;
constexpr double kGeluCubic = 0.044715;

// Index of the value of gelu's `approximate` choice attribute.
constexpr int kGeluTanh = 1;

template <typename T>
KILN_SCALAR_FN T kiln_clamp(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

template <typename T>
KILN_SCALAR_FN T kiln_logistic(T x) {
  const T e = exp(-fabs(x));
  return x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

template <typename T>
KILN_SCALAR_FN T kiln_softplus(T x) {
  return (x > T(0) ? x : T(0)) + log1p(exp(-fabs(x)));
}

template <typename T>
KILN_SCALAR_FN T kiln_gelu(T x, int approximate) {
  if (approximate == kGeluTanh) {
    const T twice_u = T(2) * T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x);
    return x * kiln_logistic(twice_u);
  }
  return T(0.5) * x * erfc(-x * T(kInvSqrt2));
}

// d/dx gelu(x).
template <typename T>
KILN_SCALAR_FN T kiln_gelu_derivative(T x, int approximate) {
  if (approximate == kGeluTanh) {
    const T x2 = x * x;
    const T twice_u = T(2) * T(kSqrt2OverPi) * (x + T(kGeluCubic) * x2 * x);
    const T s = kiln_logistic(twice_u);
    const T one_minus_s = kiln_logistic(-twice_u);
    // u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    const T du = T(kSqrt2OverPi) * (T(1) + T(3) * T(kGeluCubic) * x2);
    return s + T(2) * x * du * s * one_minus_s;
  }
  const T cdf = T(0.5) * erfc(-x * T(kInvSqrt2));
  const T pdf = T(kInvSqrt2Pi) * exp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// d/dx x sigmoid(x) = s (1 + x (1 - s)), with 1 - s as sigmoid(-x).
template <typename T>
KILN_SCALAR_FN T kiln_silu_derivative(T x) {
  return kiln_logistic(x) * (T(1) + x * kiln_logistic(-x));
}

// d/dx x tanh(softplus(x)) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)).
template <typename T>
KILN_SCALAR_FN T kiln_mish_derivative(T x) {
  const T t = tanh(kiln_softplus(x));
  return t + x * kiln_logistic(x) * ((T(1) - t) * (T(1) + t));
}

#endif  // KILN_IR_SCALAR_MATH_H
