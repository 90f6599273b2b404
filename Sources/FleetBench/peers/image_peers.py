#!/usr/bin/env python3
"""Benchmark driver for peer image pipelines: Pillow (+ pillow-heif) and pyvips.

`fleet-bench image` runs this file as a subprocess to measure the peers in the
same run as our Swift+libvips ImageNormalizer:

    python image_peers.py pillow --concurrency 2 --count 20 FILE [FILE...]
    python image_peers.py pyvips --concurrency 2 --count 28 FILE [FILE...]

Each peer does what our pipeline does, as closely as the library allows: read
the file (JPEG, PNG, WebP, HEIC), apply EXIF orientation, shrink to at most
1200 px wide (never upscale, keep aspect), flatten alpha onto white, convert
to sRGB, strip all metadata, encode JPEG Q80 with optimised Huffman tables
into an in-memory buffer (nothing is written to disk, like ours).

How it is kept fair:
  * pyvips runs the same libvips calls as ours: a header read, thumbnail(size=down,
    fail_on=error, export_profile=srgb only for files with an ICC profile: libvips
    8.14 shifts untagged colours otherwise, libvips#3479), flatten on white,
    colourspace(srgb), jpegsave_buffer(Q=80, optimize_coding, strip), cache off.
  * Pillow does the same work by the same quality rule: JPEG shrink-on-load with
    draft() to 2x the target (DRAFT_GAP = 2.0, the rule of libvips and of Pillow's own
    Image.thumbnail(); on the 12 MP phone photo that is a full decode, as in libvips;
    DRAFT_GAP = 1.0 decodes at half size, ~2x faster and 0.55 levels off), a LANCZOS resize
    with reducing_gap=2.0 (libvips' resize uses gap 2.0 too), resize before
    exif_transpose so the rotation runs on the small image, ImageCms to sRGB
    only if the file carries an ICC profile, save(quality=80, optimize=True)
    without exif, icc_profile or comment (4:2:0, as libvips picks below Q90).
    HEIC comes from pillow-heif; without it HEIC files are skipped.
  * N images in total, cycling over the files, spread over C threads (both
    libraries release the GIL in decode, resize and encode) after one untimed
    warm-up pass over every file. The clock covers the N images only.
    Threads are fair here: 2 threads matched 2 single-thread processes.
    libvips additionally uses its own worker threads per image (default: one
    per core), exactly as our pipeline does.
  * Only the chosen peer's library is imported: pyvips loads the system
    libheif, and pillow-heif then binds to it instead of its bundled one and
    crashes on HEIC.

The LAST stdout line is one JSON object:
  {"peer", "images_per_s", "max_rss_kb", "count", "concurrency", "skipped"}
where max_rss_kb is this process's peak RSS (getrusage RUSAGE_SELF) and
skipped lists the files the peer cannot read. On failure the last line is
{"error": "..."} and the exit code is 1.
"""
from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor

MAX_WIDTH = 1200
QUALITY = 80
DRAFT_GAP = 2.0  # Pillow draft() asks for this times the target size: libvips' rule and Image.thumbnail()'s default
RESIZE_GAP = 2.0  # Pillow reducing_gap; libvips' resize uses the same 2.0


class Unsupported(Exception):
    """The peer cannot read this file's format: the file is skipped."""


def pillow_pipeline():
    from PIL import Image, ImageCms, ImageOps, UnidentifiedImageError

    try:
        from pillow_heif import register_heif_opener
        register_heif_opener()
    except ImportError:
        print("pillow: pillow-heif not installed, HEIC files will be skipped", file=sys.stderr)
    srgb = ImageCms.createProfile("sRGB")
    sideways = {5, 6, 7, 8}  # EXIF orientations that swap width and height

    def run(path: str) -> bytes:
        try:
            im = Image.open(path)
        except UnidentifiedImageError as error:
            raise Unsupported(str(error)) from error
        with im:
            icc = im.info.get("icc_profile")
            turned = im.getexif().get(0x0112, 1) in sideways
            w, h = im.size
            shown_w = h if turned else w
            if shown_w > MAX_WIDTH:  # never upscale
                scale = MAX_WIDTH / shown_w
                size = (max(1, round(w * scale)), max(1, round(h * scale)))
                im.draft("RGB", (int(size[0] * DRAFT_GAP), int(size[1] * DRAFT_GAP)))  # JPEG only
            else:
                size = None
            has_alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
            if im.mode not in ("RGB", "RGBA", "L", "LA", "CMYK"):  # P, 1, I;16...: resize needs real pixels
                im = im.convert("RGBA" if has_alpha else "RGB")
            if size:
                im = im.resize(size, Image.Resampling.LANCZOS, reducing_gap=RESIZE_GAP)
            im = ImageOps.exif_transpose(im)
            if has_alpha:
                im = im.convert("RGBA")
                flat = Image.new("RGB", im.size, (255, 255, 255))
                flat.paste(im, mask=im.getchannel("A"))
                im = flat
            if icc:
                im = ImageCms.profileToProfile(im, io.BytesIO(icc), srgb, outputMode="RGB")
            elif im.mode != "RGB":
                im = im.convert("RGB")
            out = io.BytesIO()
            im.save(out, "JPEG", quality=QUALITY, optimize=True,
                    exif=b"", icc_profile=None, comment=b"")  # comment would be copied over
            return out.getvalue()

    return run


def pyvips_pipeline():
    import pyvips

    pyvips.cache_set_max(0)

    def run(path: str) -> bytes:
        try:
            # As ours: export through sRGB only when the file carries a profile (libvips#3479).
            header = pyvips.Image.new_from_file(path, fail_on="error")
            tagged = header.get_typeof("icc-profile-data") != 0
            options = {"export_profile": "srgb"} if tagged else {}
            im = pyvips.Image.thumbnail(path, MAX_WIDTH, height=10_000_000, size="down",
                                        fail_on="error", **options)
        except pyvips.Error as error:
            if "not a known file format" in str(error):
                raise Unsupported(str(error)) from error
            raise
        if im.hasalpha():
            im = im.flatten(background=255)
        if im.interpretation != "srgb":
            im = im.colourspace("srgb")
        return im.jpegsave_buffer(Q=QUALITY, optimize_coding=True, strip=True)

    return run


PEERS = {"pillow": pillow_pipeline, "pyvips": pyvips_pipeline}


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors also end in the JSON error line
        raise ValueError(message)


def measure(peer: str, files: list[str], count: int, concurrency: int) -> dict:
    run = PEERS[peer]()
    readable, skipped = [], []
    for path in dict.fromkeys(files):  # warm-up: every file once, untimed
        try:
            if not run(path):
                raise RuntimeError(f"{path}: empty output")
            readable.append(path)
        except Unsupported as error:
            print(f"{peer}: skipping {path}: {error}", file=sys.stderr)
            skipped.append(path)
    if not readable:
        raise RuntimeError(f"{peer} can read none of the files")
    work = [readable[i % len(readable)] for i in range(count)]
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        started = time.perf_counter()
        total = sum(len(out) for out in pool.map(run, work))
        elapsed = time.perf_counter() - started
    print(f"{peer}: {count} images, {total} bytes out, {elapsed:.3f} s", file=sys.stderr)
    return {
        "peer": peer,
        "images_per_s": round(count / elapsed, 3),
        "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "count": count,
        "concurrency": concurrency,
        "skipped": skipped,
    }


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("files", nargs="+", metavar="FILE")
    try:
        args = parser.parse_args()
        if args.concurrency < 1 or args.count < 1:
            raise ValueError("--concurrency and --count must be at least 1")
        result = measure(args.peer, args.files, args.count, args.concurrency)
    except Exception as error:  # noqa: BLE001 - reported as the JSON line
        print(json.dumps({"error": f"{type(error).__name__}: {str(error).strip()}"}), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
