// The shapes of the models the trainer builds: an MLP, a small CNN and a character-level decoder-only
// transformer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mxlab::train {

/// Which model and its sizes. Layer names (for recipe overrides and metrics): MLP fc1..fcN; CNN conv1, conv2,
/// fc1, fc2; transformer blocks.I.attn.{qkv,qk,av,proj}, blocks.I.mlp.{fc1,fc2}, head; resnet conv1,
/// layerS.B.{conv1,conv2,downsample.0}, fc; mobilenet stem, blocks.I.{expand,dw,project}, last, fc; vit
/// patch_embed, the transformer's blocks, head.
struct ModelConfig {
  std::string kind = "mlp";             ///< one of model_kinds()
  std::vector<std::int64_t> hidden = {256, 128};  ///< MLP hidden widths
  std::int64_t conv1 = 16, conv2 = 32;  ///< CNN channels (3x3 convolutions, each followed by ReLU and 2x2 pooling)
  std::int64_t fc = 128;                ///< CNN hidden width after the convolutions
  bool avg_pool = false;                ///< CNN: average instead of max pooling
  bool gelu = false;                    ///< MLP/CNN: GELU instead of ReLU (the transformer's MLP always uses GELU)
  double init_gain = 1.0;               ///< MLP/CNN: multiplies the He-normal initial weights
  std::int64_t d_model = 128, layers = 2, heads = 4, context = 64;  ///< transformer (vit: all but context)
  std::int64_t width = 16;              ///< resnet: channels of the first stage (then 2x, 4x, 8x); mobilenet:
                                        ///< its channels times width / 16
  std::int64_t patch = 4;               ///< vit: side of the square patches (dividing the image's sides)
};

/// The models the trainer builds: mlp, cnn, transformer (text), resnet, mobilenet, vit (images).
std::vector<std::string> model_kinds();
/// Whether kind is one of model_kinds().
bool is_model_kind(const std::string& kind);

}  // namespace mxlab::train
