// Checks TOML recipe files against the same recipes written in the old "key = value" lines (read for one more
// release): equal recipes, every key, overrides in the order written, errors with the file and line, and
// recipe_text's TOML read back to the same text.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mxlab/train/recipe.hpp"

using namespace mxlab;
using namespace mxlab::train;

namespace {

void check_same(const Recipe& a, const Recipe& b) {
  CHECK(recipe_text(a) == recipe_text(b));
  CHECK(a.name == b.name);
  CHECK(a.overrides.size() == b.overrides.size());
}

}  // namespace

TEST_CASE("a TOML recipe equals the same recipe in the old lines, which are still read", "[train][recipe]") {
  const char* toml = R"(# a recipe
preset = "mxfp8"
name = "mine"
g = "mxfp8_e5m2"
nongemm = "bf16"
loss_scaling = "dynamic"
loss_scale = 1024
growth_interval = 10
growth = 2.5
backoff = 0.25
min_scale = 1e-3

[[layer]]
pattern = "fc1"
w = "fp32"
a = "mxint8"

[[layer]]
pattern = "re:fc[23]"
a = "mxint8"
)";
  const char* old = "preset = mxfp8\nname = mine\ng = mxfp8_e5m2\nnongemm = bf16\nloss_scaling = dynamic\n"
                    "loss_scale = 1024\ngrowth_interval = 10\ngrowth = 2.5\nbackoff = 0.25\nmin_scale = 1e-3\n"
                    "layer fc1 w = fp32\nlayer fc1 a = mxint8\nlayer re:fc[23] a = mxint8\n";
  RecipeSyntax ts = RecipeSyntax::KeyValue, os = RecipeSyntax::Toml;
  auto t = parse_recipe(toml, "t.toml", &ts);
  auto o = parse_recipe(old, "o.recipe", &os);
  REQUIRE(t);
  REQUIRE(o);
  CHECK(ts == RecipeSyntax::Toml);
  CHECK(os == RecipeSyntax::KeyValue);
  check_same(*t, *o);
  CHECK(t->loss_scaling.growth == 2.5);
  CHECK(t->loss_scaling.min_scale == 1e-3);
  REQUIRE(t->overrides.size() == 3);
  CHECK(t->overrides[0].pattern == "fc1");
  CHECK(t->overrides[0].role == Role::W);
  CHECK(t->overrides[1].role == Role::A);
  CHECK(t->overrides[2].pattern == "re:fc[23]");
  // recipe.txt is TOML and reads back to the same text.
  const std::string text = recipe_text(*t);
  CHECK_THAT(text, Catch::Contains("name = \"mine\"\n") && Catch::Contains("[[layer]]\npattern = \"fc1\"\nw = \"fp32\"\n"));
  RecipeSyntax back_syntax = RecipeSyntax::KeyValue;
  auto back = parse_recipe(text, "recipe.txt", &back_syntax);
  REQUIRE(back);
  CHECK(back_syntax == RecipeSyntax::Toml);
  CHECK(recipe_text(*back) == text);
}

TEST_CASE("delayed scaling and numbers in TOML recipes", "[train][recipe]") {
  auto r = parse_recipe("preset = \"fp8_delayed\"\namax_history_len = 16\namax_compute_algo = \"most_recent\"\nmargin = -2\n",
                        "d.toml");
  REQUIRE(r);
  CHECK(r->delayed.history_len == 16);
  CHECK(r->delayed.algo == DelayedScaling::Algo::MostRecent);
  CHECK(r->delayed.margin == -2);
  // Every digit of a loss-scaling value comes back (shortest round-trip decimal, a TOML float).
  auto d = parse_recipe("loss_scaling = \"static\"\nloss_scale = 0.1\n", "s.toml");
  REQUIRE(d);
  CHECK(d->loss_scaling.initial == 0.1);
  CHECK_THAT(recipe_text(*d), Catch::Contains("loss_scale = 0.1\n"));
}

TEST_CASE("an accumulation model in a recipe reads, writes back and refuses bad models", "[train][recipe]") {
  auto r = parse_recipe("preset = \"mxfp8\"\naccumulate = \"tensorcore-trunc14,promote=128\"\n", "a.toml");
  REQUIRE(r);
  CHECK(r->accumulate == "tensorcore-trunc14,promote=128");
  CHECK_THAT(recipe_text(*r), Catch::Contains("accumulate = \"tensorcore-trunc14,promote=128\"\n"));
  auto back = parse_recipe(recipe_text(*r), "recipe.txt");
  REQUIRE(back);
  CHECK(back->accumulate == r->accumulate);
  CHECK(recipe_text(*back) == recipe_text(*r));
  // Without the key the recipe has no model, and its text has no accumulate line.
  auto plain = parse_recipe("preset = \"mxfp8\"\n", "p.toml");
  REQUIRE(plain);
  CHECK(plain->accumulate.empty());
  CHECK_THAT(recipe_text(*plain), !Catch::Contains("accumulate"));
  // A bad model: the model parser's message, after the file, line and key.
  auto bad = parse_recipe("preset = \"fp32\"\naccumulate = \"acc=aligned:40\"\n", "bad.toml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::StartsWith("bad.toml:2: accumulate: model setting 'acc=aligned:40': the bits kept "
                                                    "must be an integer from 2 to 30"));
  Recipe set;
  CHECK(apply_recipe_setting(set, "accumulate", "fp32-seq") == std::nullopt);
  CHECK(set.accumulate == "fp32-seq");
  auto e = apply_recipe_setting(set, "accumulate", "no-such-model");
  REQUIRE(e);
  CHECK_THAT(e->message, Catch::StartsWith("accumulate: model 'no-such-model'"));
  CHECK(set.accumulate == "fp32-seq");
}

TEST_CASE("bad TOML recipes: the file, the line and the problem", "[train][recipe]") {
  const std::pair<const char*, const char*> cases[] = {
      {"w = \"not-a-format\"\n", "bad.toml:1: "},
      {"name = \"x\"\nw = 4\n", "bad.toml:2: key 'w' is an integer, expected a string"},
      {"name = \"x\"\nloss_scale = \"1024\"\n", "bad.toml:2: key 'loss_scale' is a string, expected a number"},
      {"colour = \"blue\"\n", "bad.toml:1: unknown key 'colour'"},
      {"margin = 65\n", "bad.toml:1: 'margin' needs a whole number -64..64, got '65'"},
      {"preset = \"fp32\"\n[[layer]]\nw = \"fp32\"\n", "bad.toml:2: [[layer]] needs a pattern"},
      {"preset = \"fp32\"\n[[layer]]\npattern = \"fc1\"\nq = \"fp32\"\n", "bad.toml:4: "},
      {"preset = \"fp32\"\n[layer]\npattern = \"fc1\"\n", "expected [[layer]] tables"},
      {"preset = \"fp32\"\n[[layer]]\npattern = \"re:(fc\"\nw = \"fp32\"\n", "invalid regular expression"},
      {"name = \"unclosed\n", "bad.toml:1: "},
      {"preset = \"fp32\"\npreset = \"fp16\"\n", "bad.toml:2: "},  // a key twice is a TOML error
      {"", "holds no settings (for FP32 write 'preset = \"fp32\"')"},
      {"# only a comment\n", "holds no settings"},
  };
  for (const auto& [text, message] : cases) {
    INFO(text);
    auto r = parse_recipe(text, "bad.toml");
    REQUIRE_FALSE(r);
    CHECK_THAT(r.error().message, Catch::Contains(message));
  }
}

TEST_CASE("recipe_text quotes any name as a TOML string", "[train][recipe]") {
  Recipe r;
  for (const std::string& name : {std::string("a \"quoted\" \\ name\twith\ttabs"), std::string("line\nbreak\x7f\x01"),
                                 std::string("bad utf-8 \xff\xc0\x80 and \xe2\x82\xac"), std::string("\xed\xa0\x80")}) {
    INFO(name);
    r.name = name;
    const std::string text = recipe_text(r);
    auto back = parse_recipe(text, "q.toml");
    REQUIRE(back);
    CHECK(recipe_text(*back) == text);
    if (name.find('\xff') == std::string::npos && name.find('\xed') == std::string::npos) CHECK(back->name == name);
  }
}

TEST_CASE("apply_recipe_setting and add_recipe_override change a recipe as its file would", "[train][recipe]") {
  auto r = recipe_preset("fp8_delayed");
  REQUIRE(r);
  Recipe x = *r;
  CHECK_FALSE(apply_recipe_setting(x, "margin", "1"));
  CHECK_FALSE(add_recipe_override(x, "fc1", "w", "fp32"));
  CHECK_FALSE(apply_recipe_setting(x, "preset", "mxfp4"));
  CHECK(x.name == r->name);  // a preset keeps the recipe's name
  CHECK(x.formats.w == "mxfp4");
  CHECK(x.overrides.empty());
  auto bad = apply_recipe_setting(x, "margin", "x");
  REQUIRE(bad);
  CHECK(bad->message == "'margin' needs a whole number -64..64, got 'x'");
  CHECK(add_recipe_override(x, "fc1", "q", "fp32"));
}

TEST_CASE("a recipe holds its formats parsed: once when set, shared by copies", "[train][recipe]") {
  RoleFormat f("mxfp8_e4m3@32x32");
  REQUIRE(f.format());
  REQUIRE(f.format()->has_value());
  CHECK((*f.format())->name == "mxfp8_e4m3@32x32");
  const RoleFormat copy = f;
  CHECK(&copy.format() == &f.format());  // the same parsed format, not a second parse
  CHECK_FALSE(RoleFormat("fp32").format()->has_value());
  CHECK_FALSE(RoleFormat().format()->has_value());
  // A text that is no format keeps its error; layer_formats reports it for the role.
  Recipe r;
  r.formats.g = "e9m9x";
  REQUIRE_FALSE(r.formats.g.format());
  auto formats = layer_formats(r, "fc1");
  REQUIRE_FALSE(formats);
  CHECK_THAT(formats.error().message, Catch::Contains("layer 'fc1', role g: format 'e9m9x'"));
}

TEST_CASE("overlapping override patterns resolve once per run to the formats of the written order", "[train][recipe]") {
  // Each layer's formats as the overrides define them: every table whose pattern matches the layer, in the order
  // written, the later winning (a glob, a narrower glob, a regex, a pattern matching every layer).
  auto r = parse_recipe(
      "preset = \"mxfp8\"\n"
      "[[layer]]\npattern = \"blocks.*\"\nw = \"fp16\"\n"
      "[[layer]]\npattern = \"blocks.0.*\"\nw = \"mxfp4\"\n"
      "[[layer]]\npattern = \"re:blocks\\\\.[01]\\\\.attn\\\\..*\"\na = \"bf16\"\n"
      "[[layer]]\npattern = \"blocks.*.attn.qk\"\na = \"fp32\"\n"
      "[[layer]]\npattern = \"*\"\ng = \"mxint8\"\n"
      "[[layer]]\npattern = \"head\"\nw = \"fp32\"\nw_bp = \"e4m3\"\n",
      "overlap.toml");
  REQUIRE(r);
  // Role order w, a, g, w_bp, a_bp; "" is FP32 (no format).
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"head", {"", "mxfp8_e4m3", "mxint8", "e4m3", "mxfp8_e4m3"}},
      {"blocks.0.attn.qkv", {"mxfp4", "bf16", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
      {"blocks.0.attn.qk", {"mxfp4", "", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
      {"blocks.1.attn.av", {"fp16", "bf16", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
      {"blocks.1.mlp.fc1", {"fp16", "mxfp8_e4m3", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
      {"blocks.2.attn.qk", {"fp16", "", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
      {"embed", {"mxfp8_e4m3", "mxfp8_e4m3", "mxint8", "mxfp8_e4m3", "mxfp8_e4m3"}},
  };
  auto names = [](const std::vector<std::optional<BlockFormat>>& formats) {
    std::vector<std::string> out;
    for (const auto& f : formats) out.push_back(f ? f->name : "");
    return out;
  };
  auto table = LayerFormatTable::make(*r);
  REQUIRE(table);
  // Twice over, the second time in the reverse order: a layer asked for again reads its resolved row.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t k = 0; k < expected.size(); ++k) {
      const auto& [layer, want] = expected[pass == 0 ? k : expected.size() - 1 - k];
      INFO(layer << ", pass " << pass);
      auto resolved = table->formats(layer);
      REQUIRE(resolved);
      CHECK(names(*resolved) == want);
      auto single = layer_formats(*r, layer);
      REQUIRE(single);
      CHECK(names(*single) == want);
    }
  }
  // A pattern that does not parse fails the table, as it fails every layer's lookup.
  Recipe bad = *r;
  bad.overrides.push_back({"re:(", Role::W, RoleFormat("fp32")});
  auto broken = LayerFormatTable::make(bad);
  REQUIRE_FALSE(broken);
  auto single = layer_formats(bad, "head");
  REQUIRE_FALSE(single);
  CHECK(broken.error().message == single.error().message);
}
