"""Where a command writes: every `--output` file and `--output_dir` folder gets the folders it goes into, as
`--output_dir` always has; a location that cannot be written is refused in one line before anything loads."""

from hf_vanilla_transformer import cli
from tests.helpers import SENTENCES, serving_model_dir


def test_translate_creates_the_folders_its_output_goes_into(tmp_path, capsys):
    source = tmp_path / "in.de"
    source.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    output = tmp_path / "nodir" / "sub" / "out.en"
    assert (
        cli.main(["translate", "--model", str(serving_model_dir()), str(source), "--output", str(output), "--quiet"])
        == 0
    )
    assert len(output.read_text(encoding="utf-8").splitlines()) == 1


def test_an_output_under_a_file_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    argv = ["translate", "--model", str(tmp_path / "no-model"), "--output", str(tmp_path / "file" / "out.en")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--output" in err and "no-model" not in err, err
