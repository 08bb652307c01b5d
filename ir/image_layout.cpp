#include "ir/image_layout.h"

namespace kiln::ir {

std::optional<ImageLayout> parse_image_layout(std::string_view text) {
  if (text == "nchw") return ImageLayout::Nchw;
  if (text == "nhwc") return ImageLayout::Nhwc;
  return std::nullopt;
}

std::string_view image_layout_name(ImageLayout layout) {
  return layout == ImageLayout::Nhwc ? "nhwc" : "nchw";
}

ImageLayout image_layout(const Node& node) {
  const auto found = node.attrs.find(std::string(kLayoutAttribute));
  if (found == node.attrs.end()) return ImageLayout::Nchw;
  const auto* text = std::get_if<std::string>(&found->second);
  // Shape inference has refused any other value before anything reads it.
  return text != nullptr && *text == "nhwc" ? ImageLayout::Nhwc : ImageLayout::Nchw;
}

Shape to_nchw(const Shape& shape, ImageLayout layout) {
  if (layout == ImageLayout::Nchw || shape.size() != 4) return shape;
  return {shape[0], shape[3], shape[1], shape[2]};
}

Shape from_nchw(const Shape& nchw, ImageLayout layout) {
  if (layout == ImageLayout::Nchw || nchw.size() != 4) return nchw;
  return {nchw[0], nchw[2], nchw[3], nchw[1]};
}

int channel_axis(ImageLayout layout) { return layout == ImageLayout::Nhwc ? 3 : 1; }

std::vector<int64_t> nchw_to_nhwc_perm() { return {0, 2, 3, 1}; }
std::vector<int64_t> nhwc_to_nchw_perm() { return {0, 3, 1, 2}; }

}  // namespace kiln::ir
