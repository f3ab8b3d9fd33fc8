"""Vision speed over the sample videos: frames per second for OCR, the classifier and a (random,
ViT-B/32-sized) CLIP model, and the vision stage's real-time factor beside the speech stage's.

    python benchmarks/vision_speed.py [MEDIA_DIR/video] [--skip-speech]

Keyframes (each part's middle frame) come from the media stage as ingestion makes them (decoded
once, reused by every model); the stage rows also classify each part's further samples.
Real-time factor = seconds of video per wall-clock second of the stage (higher is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import string
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mediaindex.config import load_settings  # noqa: E402
from mediaindex.models.vision import load_classifier, load_clip, load_text_reader  # noqa: E402
from mediaindex.pipeline.discover import discover  # noqa: E402
from mediaindex.pipeline.stages.decode import decode_media  # noqa: E402


def random_clip(target: Path) -> Path:
    """A CLIP checkpoint with ViT-B/32 shapes (transformers' CLIPConfig defaults) and random weights."""
    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    target.mkdir(parents=True, exist_ok=True)
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    (target / "vocab.json").write_text(json.dumps(vocab))
    (target / "merges.txt").write_text("#version: 0.2\n")
    eos = vocab["<|endoftext|>"]
    config = CLIPConfig(text_config=dict(vocab_size=len(vocab), bos_token_id=vocab["<|startoftext|>"],
                                         eos_token_id=eos, pad_token_id=eos))
    torch.manual_seed(0)
    CLIPModel(config).save_pretrained(target)
    CLIPProcessor(image_processor=CLIPImageProcessor(),
                  tokenizer=CLIPTokenizer(str(target / "vocab.json"), str(target / "merges.txt"))).save_pretrained(target)
    return target


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("media", nargs="?", default=str(REPO.parent / "shared" / "media" / "video"))
    parser.add_argument("--skip-speech", action="store_true")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads per model for vision and speech (default: the cpu profile's)")
    args = parser.parse_args()

    import torch

    from mediaindex.pipeline.stages.speech import SpeechStage
    from mediaindex.pipeline.stages.vision import VisionStage

    work = Path(tempfile.mkdtemp(prefix="vision-bench-"))
    clip_dir = random_clip(work / "clip-b32")
    threads = {"threads": args.threads} if args.threads else {}
    settings = load_settings("cpu", index_dir=work / "index", vision={**threads, "clip": str(clip_dir)},
                             speech={"cpu_threads": args.threads} if args.threads else {})
    torch.set_num_threads(settings.vision.threads or min(4, os.cpu_count() or 1))
    no_clip = settings.model_copy(update={"vision": settings.vision.model_copy(update={"clip": None})})

    files = discover([args.media]).files
    items, decode_s = [], 0.0
    for path in files:
        item, dt = timed(lambda p=path: decode_media(str(p), settings))
        items.append(item)
        decode_s += dt
    frames = [k.image for item in items for k in item.keyframes]
    duration = sum(item.info.duration for item in items if item.info.has_video)

    results: dict[str, object] = {"videos": len(items), "video_seconds": round(duration, 1),
                                  "shots": sum(len(item.shots) for item in items),
                                  "keyframes": len(frames),
                                  "samples": sum(len(k.samples) or 1 for item in items for k in item.keyframes),
                                  "decode_s": round(decode_s, 2)}
    reader, results["ocr_load_s"] = timed(lambda: load_text_reader(settings.vision))
    classifier, results["classifier_load_s"] = timed(lambda: load_classifier(settings.vision))
    clip, results["clip_load_s"] = timed(lambda: load_clip(settings.vision))

    lines, dt = timed(lambda: [reader.read(f) for f in frames])
    results["ocr_frames_per_s"] = round(len(frames) / dt, 2)
    results["ocr_frames_with_text"] = sum(1 for ls in lines if ls)
    _, dt = timed(lambda: classifier.predict(frames))
    results["classifier_frames_per_s"] = round(len(frames) / dt, 2)
    _, dt = timed(lambda: clip.embed_images(frames))
    results["clip_b32_random_frames_per_s"] = round(len(frames) / dt, 2)

    # The stage as ingestion runs it (near-identical keyframes grouped, OCR once per picture).
    for name, stage_settings in (("vision_stage", no_clip), ("vision_stage_with_clip", settings)):
        stage = VisionStage(stage_settings)
        fresh = [decode_media(str(p), stage_settings) for p in files]
        _, dt = timed(lambda st=stage, its=fresh: [st.process(i) for i in its])
        results[f"{name}_s"] = round(dt, 2)
        results[f"{name}_rtf"] = round(duration / dt, 2)
        results[f"{name}_frames_classified"] = stage.frames_classified

    if not args.skip_speech:
        speech = SpeechStage(settings)
        audio_items = [decode_media(str(p), settings) for p in files]
        audio_s = sum(i.info.duration for i in audio_items if i.info.has_audio)
        _, dt = timed(lambda: [speech.process(i) for i in audio_items])
        results["speech_stage_s"] = round(dt, 2)
        results["speech_audio_seconds"] = round(audio_s, 1)
        results["speech_stage_rtf"] = round(audio_s / dt, 2)

    results["machine"] = (f"{platform.machine()}, {os.cpu_count()} CPUs, vision threads {settings.vision.threads or 'auto'}, "
                          f"speech threads {settings.speech.cpu_threads or 'auto'}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
