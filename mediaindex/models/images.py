"""Turn an image file or array of any common kind into the RGB uint8 array every vision model takes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from mediaindex.errors import MediaIndexError

MIN_SIDE = 8  # smaller than this, nothing in the picture can be recognised or read


class ImageInputError(MediaIndexError):
    """An image cannot be used: unreadable, empty or too small."""


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode in {"I;16", "I;16B", "I;16L", "I"}:
        # 16-bit / 32-bit grayscale: scale the real range to 8 bits instead of clipping at 255.
        data = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or data.max() > 255 else 255.0
        return Image.fromarray(np.clip(data / top * 255.0 + 0.5, 0, 255).astype(np.uint8)).convert("RGB")
    if img.mode in {"RGBA", "LA", "PA"} or (img.mode == "P" and "transparency" in img.info):
        # Transparent pixels count as white background (how a viewer shows them), not as black.
        rgba = img.convert("RGBA")
        canvas = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(canvas, rgba).convert("RGB")
    return img.convert("RGB")


def load_image(path: str | Path) -> np.ndarray:
    """An image file as H x W x 3 uint8 RGB; a clear ImageInputError for what cannot be used."""
    path = Path(path)
    if not path.is_file():
        raise ImageInputError(f"{path}: image file not found")
    try:
        with Image.open(path) as img:
            img.seek(0)  # first frame of an animation
            img.load()
            # Camera photos are often stored sideways with an EXIF orientation tag.
            rgb = _to_rgb(ImageOps.exif_transpose(img))
    except Image.DecompressionBombError as exc:
        raise ImageInputError(f"{path}: image too large to open safely ({exc})") from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise ImageInputError(f"{path}: not a readable image ({exc})") from exc
    return check_image(np.asarray(rgb), str(path))


def check_image(image: np.ndarray, name: str = "image") -> np.ndarray:
    """Validate an array as an image and bring it to H x W x 3 uint8 RGB."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 3, 4):
        raise ImageInputError(f"{name}: expected an H x W x 3 image, got an array of shape {image.shape}")
    if image.dtype != np.uint8:  # bring values to 8 bits first, then channels
        if image.dtype == np.uint16:
            image = (image.astype(np.float32) / 257.0 + 0.5).astype(np.uint8)
        elif np.issubdtype(image.dtype, np.floating) and float(np.nanmax(image, initial=0)) <= 1.0:
            image = (np.nan_to_num(image) * 255.0 + 0.5).clip(0, 255).astype(np.uint8)
        else:
            image = np.nan_to_num(image).clip(0, 255).astype(np.uint8)
    if image.shape[2] == 1:
        image = np.repeat(image, 3, axis=2)
    if image.shape[2] == 4:
        image = np.asarray(_to_rgb(Image.fromarray(image, "RGBA")))
    height, width = image.shape[:2]
    if min(height, width) < MIN_SIDE:
        raise ImageInputError(
            f"{name}: {width}x{height} pixels is too small to recognise anything (at least {MIN_SIDE}x{MIN_SIDE})"
        )
    return np.ascontiguousarray(image)


def resize_center_crop(image: np.ndarray, size: int, resize_to: int | None = None) -> np.ndarray:
    """Scale the shorter side to `resize_to` (default size / 0.875) and cut the central size x size."""
    resize_to = resize_to or int(round(size / 0.875))
    img = Image.fromarray(image)
    scale = resize_to / min(img.size)
    w, h = max(size, round(img.width * scale)), max(size, round(img.height * scale))
    img = img.resize((w, h), Image.Resampling.BICUBIC)
    left, top = (w - size) // 2, (h - size) // 2
    return np.asarray(img.crop((left, top, left + size, top + size)))


def difference_hash(image: np.ndarray, side: int = 16) -> np.ndarray:
    """A perceptual hash (dHash): neighbouring-pixel brightness order on a small grayscale copy.

    Near-identical frames (re-encodes, a ticking timecode, slight noise) differ in few bits.
    """
    small = np.asarray(Image.fromarray(image).convert("L").resize((side + 1, side), Image.Resampling.BILINEAR), dtype=np.int16)
    return (small[:, 1:] > small[:, :-1]).reshape(-1)


def hash_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of differing bits between two hashes of the same size."""
    return float(np.count_nonzero(a != b)) / a.size
