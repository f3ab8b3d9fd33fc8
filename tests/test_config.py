from pathlib import Path

import pytest

from mediaindex.config import Settings, load_settings
from mediaindex.errors import ConfigError


def test_profiles_load() -> None:
    cpu = load_settings("cpu")
    gpu = load_settings("gpu")
    assert cpu.speech.model == "whisper-base" and cpu.speech.device == "cpu"
    assert gpu.speech.device == "cuda" and gpu.ray.stages.speech.gpus == 0.25


def test_environment_overrides_yaml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEDIAINDEX_INDEX_DIR", str(tmp_path / "idx"))
    monkeypatch.setenv("MEDIAINDEX_SPEECH__MODEL", "tiny.en")
    s = load_settings("cpu")
    assert s.index_dir == (tmp_path / "idx").resolve()
    assert s.speech.model == "tiny.en"


def test_explicit_override_beats_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEDIAINDEX_INDEX_DIR", str(tmp_path / "env"))
    assert load_settings("cpu", index_dir=tmp_path / "flag").index_dir == (tmp_path / "flag").resolve()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("speech: [1, 2", "not valid YAML"),
        ("- a\n- b\n", "must hold a mapping"),
        ("speech:\n  batch_size: -3\n", "speech.batch_size"),
        ("speech:\n  modle: tiny.en\n", "speech.modle"),
        ("ray:\n  object_store_memory: lots\n", "ray.object_store_memory"),
    ],
)
def test_bad_yaml_is_refused_clearly(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_settings(path)


def test_unknown_profile_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown config profile"):
        load_settings("nosuchprofile")
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.yaml")


def test_bad_environment_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_SPEECH__DEVICE", "tpu")
    with pytest.raises(ConfigError, match="speech.device"):
        load_settings("cpu")


def test_stage_actors_run_as_many_threads_as_the_cpus_they_reserve(settings) -> None:
    from mediaindex.pipeline.spec import StageName, StageSpec

    def sized(name: str, cpus: float, s=settings, threads: int = 0) -> Settings:
        return StageSpec(StageName(name), cpus=cpus, threads=threads).sized(s)

    assert sized("speech", 1.0).speech.cpu_threads == 1
    assert sized("decode", 0.5).frames.decode_threads == 1
    assert sized("vision", 2.5).vision.threads == 3
    # An explicit setting wins; stages without a thread setting, and the settings themselves, are left alone.
    explicit = settings.model_copy(update={"speech": settings.speech.model_copy(update={"cpu_threads": 4})})
    assert sized("speech", 1.0, explicit).speech.cpu_threads == 4
    assert sized("embed", 3.0) is settings and settings.speech.cpu_threads == 0
    # ray.stages.<stage>.threads wins over both; the language model keeps every core unless told otherwise.
    assert sized("speech", 1.0, explicit, threads=2).speech.cpu_threads == 2
    assert sized("summary", 1.0) is settings and sized("summary", 1.0, threads=3).llm.cpu_threads == 3
