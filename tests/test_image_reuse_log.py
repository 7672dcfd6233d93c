"""A reused image's build logs say what it was built from (utils/executors/images.py::ensure_image):
a run that reuses an image has logs as telling as a run that builds it."""

from __future__ import annotations

import types

from tests.infra.images import FakeImages, image_spec, write_case


def test_a_reused_image_names_its_vendor_image_and_the_requirement_layers(tmp_path):
    from utils.executors.images import ensure_image

    write_case(tmp_path / "inference", "bert", "transformers==1.0\n")
    spec = image_spec(tmp_path)
    client = types.SimpleNamespace(images=FakeImages(present={spec.tag}))
    assert ensure_image(client, spec, "h1", tmp_path / "logs" / "build_h1.log") == (spec.tag, False)
    assert client.images.builds == []  # nothing built
    assert (
        tmp_path / "logs" / "build_h1.log"
    ).read_text() == f"reused image {spec.vendor_tag}, built earlier from {spec.dockerfile}\n"
    cases_log = (tmp_path / "logs" / "build_h1_cases.log").read_text()
    assert (
        cases_log == f"reused image {spec.tag}, built earlier from requirements/bert.txt on top of {spec.vendor_tag}\n"
    )


def test_a_reused_image_without_requirements_writes_no_cases_log(tmp_path):
    from utils.executors.images import ensure_image

    spec = image_spec(tmp_path)
    client = types.SimpleNamespace(images=FakeImages(present={spec.tag}))
    assert ensure_image(client, spec, "h1", tmp_path / "build_h1.log") == (spec.tag, False)
    assert (tmp_path / "build_h1.log").read_text().startswith(f"reused image {spec.tag}, built earlier from ")
    assert not (tmp_path / "build_h1_cases.log").exists()
