"""Data folders with links: followed, but nothing is counted twice and no scan is
endless. A link loop (or one folder or image reached twice) is a DataError naming
the link, exit status 3 — tested with real os.symlink loops."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from benchmarks.common import scan_files
from benchmarks.resnet50.pytorch.dataloader import EXTENSIONS, find_samples
from common.errors import DataError
from tests.infra.trees import copy_tree


def images(folder: Path, count: int, start: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        Image.fromarray(np.full((8, 8, 3), i * 20, dtype=np.uint8)).save(folder / f"img{i}.png")


@pytest.fixture
def imagenet(tmp_path) -> Path:
    data = tmp_path / "imagenet"
    images(data / "cls0", 4)
    images(data / "cls1" / "sub", 4, start=4)
    return data


def test_links_are_followed_in_os_walk_order(imagenet, tmp_path):
    images(tmp_path / "elsewhere", 2, start=8)
    os.symlink(tmp_path / "elsewhere", imagenet / "cls1" / "linked")
    classes, samples = find_samples(str(imagenet))
    assert classes == ["cls0", "cls1"]
    names = [os.path.relpath(p, imagenet) for p, _ in samples]
    assert names == [f"cls0/img{i}.png" for i in range(4)] + ["cls1/linked/img8.png", "cls1/linked/img9.png"] + [
        f"cls1/sub/img{i}.png" for i in range(4, 8)
    ]
    assert [label for _, label in samples] == [0] * 4 + [1] * 6


@pytest.mark.parametrize("target", ["class", "data_dir", "sibling_class"])
def test_a_link_loop_is_a_data_error_naming_the_link(imagenet, target):
    pointed = {"class": imagenet / "cls1", "data_dir": imagenet, "sibling_class": imagenet / "cls0"}[target]
    link = imagenet / "cls1" / "sub" / "loop"
    os.symlink(pointed, link)
    with pytest.raises(DataError, match=f"^{link}: a link to .*already scanned") as caught:
        find_samples(str(imagenet))
    assert caught.value.exit_code == 3


def test_one_image_reached_twice_and_a_broken_link_are_data_errors(tmp_path):
    images(tmp_path / "a", 2)
    os.symlink(tmp_path / "a" / "img0.png", tmp_path / "a" / "z_again.png")
    with pytest.raises(DataError, match=r"z_again\.png: the same file as .*img0\.png"):
        scan_files(str(tmp_path / "a"), EXTENSIONS)
    (tmp_path / "a" / "z_again.png").unlink()
    os.symlink(tmp_path / "gone.png", tmp_path / "a" / "z_broken.png")
    with pytest.raises(DataError, match=r"z_broken\.png: cannot read: No such file or directory \(a broken link\?\)"):
        scan_files(str(tmp_path / "a"), EXTENSIONS)


def test_run_inference_on_a_looped_folder_exits_3_with_one_line(imagenet, tmp_path):
    link = imagenet / "cls0" / "loop"
    os.symlink(imagenet / "cls0", link)
    perf = copy_tree(tmp_path / "inference")
    log = tmp_path / "log"
    proc = subprocess.run(
        [
            sys.executable,
            "run_inference.py",
            "--perf_dir",
            str(perf),
            "--data_dir",
            str(imagenet),
            "--log_dir",
            str(log),
            "--vendor",
            "cpu",
            "--case",
            "resnet50",
            "--framework",
            "pytorch",
            "--set",
            "batch_size=2",
        ],
        cwd=perf,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 3, output[-3000:]
    assert "Traceback" not in output
    errors = [line for line in proc.stdout.splitlines() if "| ERROR" in line]
    assert len(errors) == 1 and f"{link}: a link to {imagenet / 'cls0'}, which is already scanned" in errors[0], errors
    failure = json.loads((log / "failure.json").read_text())
    assert failure["exit_code"] == 3 and failure["step"] == "dataset_and_model"
    assert not (log / "result.json").exists()
