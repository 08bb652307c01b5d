// Image layouts: where conv2d and the 2-D pools find the channels of their 4-D tensors.
//
// NCHW (PyTorch's, ONNX's and kiln's default) keeps each channel's plane contiguous; NHWC keeps
// each pixel's channels contiguous, which is what cuDNN's tensor-core convolutions read natively
// (in NCHW it transforms every operand to NHWC and back around each call). The layout-nhwc pass
// writes NHWC for the convolutions cuDNN runs on tensor cores (docs/tensor-cores.md).
//
// An op's `layout` attribute says which: a conv2d in NHWC reads x [N, H, W, C] and its weight
// as [O, KH, KW, C/groups] (cuDNN's KRSC filter format) and writes [N, OH, OW, O]; its patch
// terms run k = (kh * KW + kw) * C/groups + c, the weight's own order (split-K chunks follow
// it). A pool in NHWC reads [N, H, W, C] and writes [N, OH, OW, C].
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

enum class ImageLayout { Nchw, Nhwc };

inline constexpr std::string_view kLayoutAttribute = "layout";

// "nchw" or "nhwc"; nullopt for anything else.
std::optional<ImageLayout> parse_image_layout(std::string_view text);
std::string_view image_layout_name(ImageLayout layout);
// The node's `layout` attribute (NCHW when it has none).
ImageLayout image_layout(const Node& node);

// A 4-D shape in `layout` as [N, C, H, W] (a weight: [O, C/groups, KH, KW]), and back.
Shape to_nchw(const Shape& shape, ImageLayout layout);
Shape from_nchw(const Shape& nchw, ImageLayout layout);

// The axis of the channels of a 4-D tensor in `layout`: 1 or 3.
int channel_axis(ImageLayout layout);

// The perm of the transpose from NCHW to NHWC, {0, 2, 3, 1}, and back, {0, 3, 1, 2}.
std::vector<int64_t> nchw_to_nhwc_perm();
std::vector<int64_t> nhwc_to_nchw_perm();

}  // namespace kiln::ir
