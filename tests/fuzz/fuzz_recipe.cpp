// Fuzz target: recipe files (`mxlab train --recipe FILE`, recipe.txt) in either syntax, TOML or the old
// "key = value" lines, through the recipe parser, the formats it gives the models' layers, and the TOML text it
// writes back.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "mxlab/train/recipe.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto syntax = mxlab::train::RecipeSyntax::Toml;
  auto recipe = mxlab::train::parse_recipe(text, "fuzz.recipe", &syntax);
  if (!recipe) {
    if (recipe.error().message.empty()) std::abort();
    return 0;
  }
  // Every kind of layer name the models use gets its formats or a message.
  for (const char* layer : {"fc1", "fc3", "conv1", "conv2", "head", "blocks.0.attn.qkv", "blocks.0.attn.qk",
                            "blocks.1.attn.av", "blocks.11.mlp.fc2", "layer1.0.downsample.0", "blocks.2.dw"}) {
    auto formats = mxlab::train::layer_formats(*recipe, layer);
    if (!formats && formats.error().message.empty()) std::abort();
  }
  // recipe.txt, written in TOML whatever the syntax read, is read back as TOML to the same recipe: written
  // again, its text is unchanged.
  const std::string written = mxlab::train::recipe_text(*recipe);
  auto again_syntax = mxlab::train::RecipeSyntax::KeyValue;
  auto again = mxlab::train::parse_recipe(written, "recipe.txt", &again_syntax);
  if (!again || again_syntax != mxlab::train::RecipeSyntax::Toml || mxlab::train::recipe_text(*again) != written)
    std::abort();
  return 0;
}
