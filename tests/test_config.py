import os
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
        ("api:\n  watch_s: .inf\n", "api.watch_s"),  # a look at the roots at least once a week
        ("api:\n  watch_s: 0.5\n", "api.watch_s"),
        ("api:\n  fetch_urls: yes\n", "api.fetch_urls"),  # YAML's true, not a policy
        ("api:\n  fetch_urls: private\n", "api.fetch_urls"),
        ("ingest:\n  max_page_videos: 0\n", "ingest.max_page_videos"),
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


# ---- errors name their real source and never echo a file's text ------------------------------------------------

SECRET_LINES = "root:$6$c2VjcmV0aGFzaA$Zk9vYmFy:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"


def test_a_bad_variable_is_named_not_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_SPEECH__DEVICE", "tpu")
    with pytest.raises(ConfigError) as info:
        load_settings("cpu")
    assert "environment variable MEDIAINDEX_SPEECH__DEVICE" in str(info.value) and "cpu.yaml" not in str(info.value)
    # A check of a whole section names the variables inside it; an unknown key its own variable.
    monkeypatch.setenv("MEDIAINDEX_SPEECH__DEVICE", "cpu")
    monkeypatch.setenv("MEDIAINDEX_INDEX__DENSE_FLOOR", "0.99")
    monkeypatch.setenv("MEDIAINDEX_SPEECH__MODLE", "tiny.en")
    with pytest.raises(ConfigError) as info:
        load_settings("cpu")
    message = str(info.value)
    assert "speech.modle" in message and "variable MEDIAINDEX_SPEECH__MODLE" in message
    assert "dense_floor" in message and "variable MEDIAINDEX_INDEX__DENSE_FLOOR" in message
    unknown_key = next(problem for problem in message.split("; ") if "speech.modle" in problem)
    assert "cpu.yaml" not in unknown_key  # the profile holds a speech section, but not this key


def test_a_variable_naming_no_section_is_refused_with_the_nearest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_SERCH__X", "1")  # passed over in silence, it would change nothing
    with pytest.raises(ConfigError) as info:
        load_settings("cpu")
    assert str(info.value) == (
        "invalid configuration: the environment variable MEDIAINDEX_SERCH__X names no settings section ('serch' is "
        "not one of api, embed, frames, index, ingest, llm, ray, speech, vision); did you mean MEDIAINDEX_SPEECH__…?")
    monkeypatch.delenv("MEDIAINDEX_SERCH__X")
    monkeypatch.setenv("mediaindex_zzz__key", "1")
    with pytest.raises(ConfigError, match="mediaindex_zzz__key names no settings section \\('zzz' is not one of "
                                          "api, .*vision\\)$"):
        load_settings("cpu")
    monkeypatch.delenv("mediaindex_zzz__key")
    monkeypatch.setenv("MEDIAINDEX_INGEST__SUMMARIES", "true")  # a section's key, and names that are no section's
    monkeypatch.setenv("MEDIAINDEX_TEST_ANYTHING", "1")
    assert load_settings("cpu").ingest.summaries is True


def test_a_profile_named_by_the_environment_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_CONFIG", "nosuchprofile")
    with pytest.raises(ConfigError, match="'nosuchprofile' \\(from the environment variable MEDIAINDEX_CONFIG\\)"):
        load_settings()


def test_a_section_variable_that_is_not_json_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDIAINDEX_SPEECH", "tiny.en")
    with pytest.raises(ConfigError, match="MEDIAINDEX_SPEECH sets a whole section.*MEDIAINDEX_SPEECH__KEY"):
        load_settings("cpu")


def test_a_bad_file_value_names_file_line_and_key_and_a_flag_names_itself(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("speech:\n  model: tiny.en\n  batch_size: -3\nray:\n  object_store_memory: lots\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"speech.batch_size: Input should be greater than or equal to 1 (from {path}, line 3)" in message
    assert "ray.object_store_memory" in message and f"(from {path}, line 5)" in message
    # The variable wins over the file, and is named as the source.
    monkeypatch.setenv("MEDIAINDEX_SPEECH__BATCH_SIZE", "0")
    with pytest.raises(ConfigError, match=r"batch_size: .* \(from the environment variable MEDIAINDEX_SPEECH__BATCH"):
        load_settings(path)
    with pytest.raises(ConfigError, match=r"ray.address: .*\(from the command-line flag --address\)"):
        load_settings("cpu", ray={"address": "nowhere"})
    # Two keys that must agree, one from the file and one from a variable: both are named.
    path.write_text("index:\n  dense_ceiling: 0.5\n")
    monkeypatch.setenv("MEDIAINDEX_INDEX__DENSE_FLOOR", "0.6")
    with pytest.raises(ConfigError, match=rf"dense_floor .*variable MEDIAINDEX_INDEX__DENSE_FLOOR and {path}, line 1"):
        load_settings(path)


@pytest.mark.parametrize("content", [
    SECRET_LINES,  # a password file parses as YAML: every line a key that is no setting
    SECRET_LINES + "secret: token: x1y2z3w4\n",  # a YAML syntax error on a line of secrets
    "speech: *c2VjcmV0aGFzaA\n",  # an undefined alias: the parser's message would quote it
    "password: hunter2hunter2\n",  # a key that could be a setting's name: named, its value never
])
def test_a_file_that_is_no_config_is_described_never_echoed(tmp_path: Path, content: str) -> None:
    path = tmp_path / "shadow"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert str(path) in message, message
    told = message.replace(str(path), "FILE")
    for secret in ("c2VjcmV0aGFzaA", "Zk9vYmFy", "20228", "x1y2z3w4", "hunter2", "root", "daemon"):
        assert secret not in told, message
    assert "line" in message or "password" in message, message


def test_unreadable_and_binary_files_are_said_to_be_so(tmp_path: Path) -> None:
    binary = tmp_path / "program"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(128, 256)))
    with pytest.raises(ConfigError, match="is not a YAML file: byte 8 is not UTF-8 text"):
        load_settings(binary)
    with pytest.raises(ConfigError, match="cannot be read: Is a directory"):
        load_settings(tmp_path)


def test_the_cli_reports_a_bad_config_without_a_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "shadow"
    path.write_text(SECRET_LINES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEDIAINDEX_")}
    env["MEDIAINDEX_INDEX_DIR"] = str(tmp_path / "index")
    done = subprocess.run([sys.executable, "-m", "mediaindex", "index", "stats", "--config", str(path)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "no setting's name" in " ".join(done.stderr.split()) and "c2VjcmV0" not in done.stderr, done.stderr
    env["MEDIAINDEX_SPEECH__DEVICE"] = "tpu"
    done = subprocess.run([sys.executable, "-m", "mediaindex", "index", "stats"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert "MEDIAINDEX_SPEECH__DEVICE" in " ".join(done.stderr.split()).replace(" ", ""), done.stderr
