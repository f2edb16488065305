"""mxlab.load_recipe: a recipe file in the old "key = value" lines is read with a DeprecationWarning whose text is
the warning ``mxlab train`` prints; TOML files, presets and format names are read without one."""

import warnings

import pytest

import mxlab

OLD_LINES = "# the old lines\nw = mxfp8_e4m3\na = mxfp8_e4m3\ng = mxfp8_e5m2\n"
TOML = 'w = "mxfp8_e4m3"\na = "mxfp8_e4m3"\ng = "mxfp8_e5m2"\n'


def old_recipe_warnings(name):
    """The recipe read from name and the texts of the DeprecationWarnings it gave, checked to point at us."""
    with pytest.warns(DeprecationWarning) as caught:
        recipe = mxlab.load_recipe(name)
    assert all(w.filename == __file__ for w in caught)  # at the caller, not inside mxlab
    return recipe, [str(w.message) for w in caught]


def test_old_lines_warn(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.recipe").write_text(OLD_LINES)
    (tmp_path / "toml").mkdir()
    (tmp_path / "toml" / "old.recipe").write_text(TOML)
    recipe, texts = old_recipe_warnings("old.recipe")
    assert texts == ["recipe file 'old.recipe' is written in the old 'key = value' lines, which the next release "
                     "will not read; write it in TOML (docs/training.md, \"Recipe files\")"]
    # Read all the same: the settings of the TOML form (a file of the same name).
    monkeypatch.chdir(tmp_path / "toml")
    assert recipe.text == mxlab.load_recipe("old.recipe").text


@pytest.mark.parametrize("kind", ["toml", "preset", "format"])
def test_no_warning_otherwise(tmp_path, kind):
    path = tmp_path / "new.toml"
    path.write_text(TOML)
    name = {"toml": str(path), "preset": "mxfp8", "format": "mxfp8_e4m3"}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mxlab.load_recipe(name) is not None


def test_the_text_of_mxlab_train(cli, tmp_path):
    """The same text as mxlab train's warning for the same file (a long path shortened the same way)."""
    path = tmp_path / "old.recipe"
    path.write_text(OLD_LINES)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("abcdefgh" * 400)
    out = tmp_path / "run"
    run = cli.run("train", "--model", "transformer", "--data", f"text:{corpus}", "--steps", "1", "--batch", "2",
                  "--d-model", "8", "--heads", "2", "--layers", "1", "--context", "8", "--recipe", path, "--out", out)
    _, texts = old_recipe_warnings(str(path))
    assert len(texts) == 1
    assert f"mxlab train: warning: {texts[0]}: {out}/recipe.txt holds this recipe so\n" in run.stderr, run.stderr
