// The shapes of the models the trainer builds: an MLP, a small CNN and a character-level decoder-only
// transformer.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "mxlab/core/error.hpp"

namespace mxlab::train {

/// The models the trainer builds.
enum class ModelKind : std::uint8_t { Mlp, Cnn, Transformer, ResNet, MobileNet, Vit, Mixer };

/// The size options of ModelConfig a kind reads (what mxlab train refuses for the other kinds).
enum ModelOption : unsigned {
  kHiddenOption = 1,   ///< hidden
  kWidthOption = 2,    ///< width
  kBlocksOption = 4,   ///< d_model, layers
  kContextOption = 8,  ///< context
  kPatchOption = 16,   ///< patch
  kHeadsOption = 32,   ///< heads (the models with attention)
};

/// One kind of model as data: its name, whether it takes text (else images) and the size options it reads.
struct ModelKindTraits {
  std::string_view name;
  ModelKind value;
  bool text;
  unsigned options;
};

/// Every kind, in the order messages list them.
inline constexpr ModelKindTraits kModelKinds[] = {
    {"mlp", ModelKind::Mlp, false, kHiddenOption},
    {"cnn", ModelKind::Cnn, false, 0},
    {"transformer", ModelKind::Transformer, true, kBlocksOption | kHeadsOption | kContextOption},
    {"resnet", ModelKind::ResNet, false, kWidthOption},
    {"mobilenet", ModelKind::MobileNet, false, kWidthOption},
    {"vit", ModelKind::Vit, false, kBlocksOption | kHeadsOption | kPatchOption},
    {"mixer", ModelKind::Mixer, false, kBlocksOption | kPatchOption},
};
/// A row per kind: the last enumerator is the last row (model_kind_traits finds every kind's row).
static_assert(std::size(kModelKinds) == static_cast<std::size_t>(ModelKind::Mixer) + 1, "a traits row per model kind");

/// The traits row of a kind.
const ModelKindTraits& model_kind_traits(ModelKind kind);
/// The kind named `name`, or an error "unknown model 'NAME' (known: mlp, cnn, ...)".
Result<ModelKind> parse_model_kind(std::string_view name);
/// The names of the kinds (rows of kModelKinds, in order) that pass `keep`, joined by `sep` with `last` before the
/// last one ("a, b or c" with ", " and " or "), so a new kind appears in every list from its row.
std::string model_kind_names(const std::function<bool(const ModelKindTraits&)>& keep, std::string_view sep = ", ",
                             std::string_view last = " or ");
/// "mlp, cnn, transformer, resnet, mobilenet, vit or mixer".
std::string model_kind_list();
/// The kinds that read a size option, as "transformer, vit or mixer" (the messages refusing it for the others;
/// `last` " and " for a list of those that read it).
std::string model_kinds_reading(ModelOption option, std::string_view last = " or ");

/// A model kind, parsed once from its name where it is set (an unknown name is kept for the message the run
/// gives), then compared as an enumeration.
class ModelKindField {
 public:
  ModelKindField() = default;
  ModelKindField(ModelKind kind) : kind_(kind) {}  // NOLINT(google-explicit-constructor)
  ModelKindField(std::string_view name);           // NOLINT(google-explicit-constructor)
  ModelKindField(const char* name) : ModelKindField(std::string_view(name)) {}        // NOLINT
  ModelKindField(const std::string& name) : ModelKindField(std::string_view(name)) {}  // NOLINT

  /// Whether the name was one of kModelKinds.
  bool known() const { return known_; }
  /// The kind (Mlp for an unknown name: check known() first).
  ModelKind kind() const { return kind_; }
  std::string_view name() const { return known() ? model_kind_traits(kind_).name : std::string_view(unknown_); }
  const ModelKindTraits& traits() const { return model_kind_traits(kind_); }
  bool operator==(ModelKind k) const { return known() && kind_ == k; }
  bool operator==(std::string_view n) const { return name() == n; }

 private:
  ModelKind kind_ = ModelKind::Mlp;
  bool known_ = true;
  std::string unknown_;
};

/// Which model and its sizes. Layer names (for recipe overrides and metrics): MLP fc1..fcN; CNN conv1, conv2,
/// fc1, fc2; transformer blocks.I.attn.{qkv,qk,av,proj}, blocks.I.mlp.{fc1,fc2}, head; resnet conv1,
/// layerS.B.{conv1,conv2,downsample.0}, fc; mobilenet stem, blocks.I.{expand,dw,project}, last, fc; vit
/// patch_embed, the transformer's blocks, head; mixer stem, blocks.I.{token_mixing,channel_mixing}.{fc1,fc2},
/// head.
struct ModelConfig {
  ModelKindField kind = ModelKind::Mlp;  ///< one of kModelKinds
  std::vector<std::int64_t> hidden = {256, 128};  ///< MLP hidden widths
  std::int64_t conv1 = 16, conv2 = 32;  ///< CNN channels (3x3 convolutions, each followed by ReLU and 2x2 pooling)
  std::int64_t fc = 128;                ///< CNN hidden width after the convolutions
  bool avg_pool = false;                ///< CNN: average instead of max pooling
  bool gelu = false;                    ///< MLP/CNN: GELU instead of ReLU (the transformer's MLP always uses GELU)
  double init_gain = 1.0;               ///< MLP/CNN: multiplies the He-normal initial weights
  std::int64_t d_model = 128, layers = 2, heads = 4, context = 64;  ///< transformer (vit: all but context;
                                                                    ///< mixer: d_model and layers)
  std::int64_t width = 16;              ///< resnet: channels of the first stage (then 2x, 4x, 8x); mobilenet:
                                        ///< its channels times width / 16
  std::int64_t patch = 4;               ///< vit, mixer: side of the square patches (dividing the image's sides)
};

/// The models the trainer builds: mlp, cnn, transformer (text), resnet, mobilenet, vit, mixer (images).
std::vector<std::string> model_kinds();
/// Whether kind is one of model_kinds().
bool is_model_kind(const std::string& kind);

}  // namespace mxlab::train
