"""env_build.leave_out_unused: the packages' test suites and type stubs stay out of the
hosts' archive (fewer files for every host of a fresh slice to create); the rest stays."""

from __future__ import annotations

from pathlib import Path

from podctl.jobs import env_build


def test_test_suites_and_stubs_are_left_out_and_the_rest_kept(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.12" / "site-packages"
    kept = ["six.py", "six/__init__.py", "six/testing.py", "six/py.typed", "six/tests_helper.py",
            "numpy/testing/_private/utils.py", "six-1.0.dist-info/RECORD", "bin_data/test.txt"]
    gone = ["six/tests/test_six.py", "six/tests/deep/test_deep.py", "six/test/__init__.py",
            "six/__init__.pyi", "numpy/_core/tests/data/x.npy"]
    for name in kept + gone:
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text("X = 1\n")
    outside = tmp_path / "python" / "lib" / "python3.12" / "test" / "support.py"  # a shipped CPython's own
    outside.parent.mkdir(parents=True)
    outside.write_text("X = 1\n")

    # 5 files, the folders six/tests, six/tests/deep, six/test, numpy/_core/tests, its data
    assert env_build.leave_out_unused(tmp_path, "3.12") == 10
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()) == sorted(kept)
    assert not (site / "six" / "tests").exists() and (site / "numpy" / "_core").is_dir()
    assert outside.is_file()
    assert env_build.leave_out_unused(tmp_path / "nothing", "3.12") == 0
