"""benchmarks/startup.py: what it runs, how it summarizes, and a tiny real run (no timing is asserted)."""

from . import load_benchmark
from ..conftest import REPOSITORY_ROOT


def test_baseline_cases_follow_the_cases_that_import_elmo_hf():
    script = load_benchmark("startup")
    cases = ["python", "import-elmo_hf", "embed-one-sentence"]
    assert script.cases_to_run(cases, None) == cases
    assert script.cases_to_run(cases, REPOSITORY_ROOT) == [
        "python", "import-elmo_hf", "import-elmo_hf@baseline", "embed-one-sentence", "embed-one-sentence@baseline",
    ]
    command = script.case_command("embed-one-sentence@baseline", "one.txt", "out", "some/model")
    assert command[1:] == ["-m", "elmo_hf_cli", "embed", "one.txt", "--output", "out", "--model", "some/model"]


def test_medians_targets_differences_and_baseline_ratios():
    script = load_benchmark("startup")
    runs = {
        "transformers-config-and-auto": [(2.0, 1.9), (1.0, 0.9), (3.0, 2.9)],
        "import-elmo_hf": [(2.6, 2.5), (2.2, 2.1), (2.4, 2.3)],
        "import-elmo_hf@baseline": [(4.8, 4.6)],
        "elmo_hf-config-and-auto": [(2.6, 2.5), (2.2, 2.1), (2.4, 2.3)],  # what the difference subtracts from
    }
    report = script.summarize(runs, {case: ["python"] for case in runs})
    elmo_hf = report["cases"]["import-elmo_hf"]
    assert (elmo_hf["median"], elmo_hf["median_cpu"], elmo_hf["target"], elmo_hf["meets_target"]) == (2.4, 2.3, 2.5, True)
    assert "target" not in report["cases"]["transformers-config-and-auto"]
    assert report["differences"] == {"elmo_hf over what it needs from transformers": {"wall": 0.4, "cpu": 0.4}}
    assert report["baseline_over_this"] == {"import-elmo_hf (median)": 2.0, "import-elmo_hf (median_cpu)": 2.0}


def test_the_script_runs_fresh_processes_against_a_baseline(capsys):
    script = load_benchmark("startup")
    report = script.main(["--rounds", "1", "--warm-up", "0", "--cases", "python", "cli-help", "--baseline", str(REPOSITORY_ROOT)])
    capsys.readouterr()
    assert set(report["cases"]) == {"python", "cli-help", "cli-help@baseline"}
    assert all(len(entry["wall_seconds"]) == 1 and entry["median"] > 0 for entry in report["cases"].values())
    assert set(report["baseline_over_this"]) == {"cli-help (median)", "cli-help (median_cpu)"}


def test_the_steps_of_one_embed_cover_its_imports_and_the_command(capsys):
    script = load_benchmark("startup")
    report = script.main(["--rounds", "1", "--warm-up", "0", "--cases", "python", "--steps", "1"])
    capsys.readouterr()
    assert list(report["steps"]) == [name for name, _ in script.STEPS] + [script.COMMAND_STEP]
    assert all(step["wall"] > 0 and step["cpu"] >= 0 for step in report["steps"].values())
