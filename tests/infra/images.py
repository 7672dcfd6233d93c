"""MODE docker's image layer in tests: a case's requirements file, an ``ImageSpec`` and the Docker SDK's
images API as a recorder."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def write_case(perf: Path, case: str, text: str, framework: str = "pytorch") -> Path:
    path = perf / "benchmarks" / case / framework / "requirements.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def image_spec(tmp_path: Path, requirements=None, **kwargs):
    from utils.executors.images import ImageSpec

    folder = tmp_path / "inference" / "docker_images" / "cpu" / "pytorch"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text("FROM scratch\n")
    return ImageSpec(
        vendor="cpu",
        framework="pytorch",
        folder=folder,
        buildargs=kwargs.pop("buildargs", {}),
        requirements=requirements,
        **kwargs,
    )


class FakeImages:
    """The Docker SDK's images API, recording builds."""

    def __init__(self, present=()):
        self.present = set(present)
        self.builds: list[dict] = []

    def get(self, tag):
        from docker.errors import ImageNotFound

        if tag not in self.present:
            raise ImageNotFound(tag)

    def build(self, fileobj, tag, buildargs, **kwargs):
        with tarfile.open(fileobj=io.BytesIO(fileobj.read())) as tar:
            names = sorted(tar.getnames())
        self.builds.append({"tag": tag, "buildargs": buildargs, "files": names})
        self.present.add(tag)
        return None, [{"stream": f"built {tag}"}]
