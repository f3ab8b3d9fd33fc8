"""One archive on this machine: an index opened with its text embedder, and every call the faces make on it.

The CLI, the HTTP API and the MCP server all go through an `Archive` (or, where a running `serve` holds the
index, through a `RemoteArchive` with the same calls, see remote.py): opening an index with its embedder, the
check that an index exists, searching, transcripts, summaries, questions, ingest and reset are written here once.
The searcher, the models, the agents and Ray are imported in the calls that use them: a face that only lists
files or reads a transcript does not load them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mediaindex.config import Settings
from mediaindex.errors import MediaError, MediaIndexError
from mediaindex.index.filters import SearchFilters
from mediaindex.index.index import MediaIndex, open_index
from mediaindex.index.index import index_exists as folder_holds_index
from mediaindex.index.index import require_index as require_index_in
from mediaindex.index.naming import one_file_named
from mediaindex.index.reset import RESET_MARKER, reset_index
from mediaindex.index.schema import SCHEMA_FILE
from mediaindex.index.shared_store import READ, Access
from mediaindex.jobs import Job, JobFinished, JobStore
from mediaindex.media.probe import audio_track_index, chosen_track, track_order
from mediaindex.segments import (
    ANALYSIS_VERSION,
    MODALITIES,
    SUBTITLE,
    TRACK_FIELD,
    Hit,
    default_track,
    mark_chapters,
    of_audio_track,
    standing_for_speech,
)

if TYPE_CHECKING:
    import numpy as np

    from mediaindex.agents.events import OnEvent
    from mediaindex.agents.schema import VideoSummary
    from mediaindex.agents.tools import Archive as AgentArchive
    from mediaindex.index.catalog import Catalog, VideoRecord
    from mediaindex.index.holder import Holder
    from mediaindex.index.lease import IndexLease
    from mediaindex.index.per_thread_catalog import PerThreadCatalog
    from mediaindex.models.text_embed import TextEmbedder
    from mediaindex.search.moments import FileMoments
    from mediaindex.service import IngestHooks, IngestReport, IngestRequest, StagePipeline

Transcript = tuple[list[dict[str, Any]], dict[str, Any]]  # speech segments, and the file's facts


class ResetError(MediaIndexError):
    """An index that cannot be reset now (another process holds it) or could not be deleted completely."""


@dataclass
class JobOutcome:
    """A summary or question job as it ended, wherever it ran."""

    id: str
    kind: str
    state: str
    error: str | None
    output: dict[str, Any] | None
    markdown: str | None

    @classmethod
    def of(cls, job: Job) -> JobOutcome:
        result = job.result or {}
        return cls(job.id, job.kind, job.state, job.error, result.get("output"), result.get("markdown"))


def index_exists(settings: Settings) -> bool:
    return folder_holds_index(settings.index_dir)


def require_index(settings: Settings) -> None:
    """Reading commands never create an index: one that is not there is a clear error (`IndexMissingError`)."""
    require_index_in(settings.index_dir)


def load_embedder(settings: Settings) -> TextEmbedder:
    from mediaindex.models.text_embed import load_text_embedder

    return load_text_embedder(settings.embed, settings.cache_dir)


def embedder_when_needed(settings: Settings) -> TextEmbedder:
    """The embedder of a command's archive: loaded when the command first embeds (`DeferredEmbedder`)."""
    from mediaindex.models.text_embed import text_embedder_when_needed

    return text_embedder_when_needed(settings.embed, settings.cache_dir)


class Archive:
    """The index at `settings.index_dir` with its text embedder: opened by `Archive.open` for one command, or
    built around the `index` and `embedder` a server holds open (the server closes them, not its archives)."""

    remote = False

    def __init__(self, settings: Settings, index: MediaIndex, embedder: Any) -> None:
        self.settings, self.index, self.embedder = settings, index, embedder
        self._started_ray = False

    @classmethod
    def open(cls, settings: Settings, *, write: bool = False, wait: bool = True,
             on_wait: Callable[[Holder | None], None] | None = None, must_exist: bool = True,
             thread_safe: bool = False, embedder: Any = None) -> Archive:
        """Open the index with its embedder (a bundled one loads at its first embedding: a command that embeds
        nothing never loads it, and an ingest's pipeline loads its own): a reader reads through a process that
        holds the index; a writer (an ingest, the only caller that may create an index) waits for it
        (`wait=False`: refused at once), telling `on_wait` for whom, and repairs the index (files whose data was
        lost are indexed again)."""
        from mediaindex.models.vision import vector_dims

        if must_exist:  # before the embedder loads: a missing index is said at once
            require_index(settings)
        embedder = embedder if embedder is not None else embedder_when_needed(settings)
        access = Access(write=True, wait=wait, on_wait=on_wait) if write else READ
        index = open_index(settings, embedder.dim, embedder.name, extra_dims=vector_dims(settings.vision),
                           access=access, must_exist=must_exist, thread_safe=thread_safe, repair=write)
        return cls(settings, index, embedder)

    def close(self) -> None:
        """Close the index, and stop the Ray that a job of this archive started (a server's Ray stays up: its
        archives are not closed)."""
        try:
            self.index.close()
        finally:
            if self._started_ray:
                import ray

                ray.shutdown()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def through(self) -> Holder | None:
        """The process this one reads through, when another holds the index (its answers may change as it
        writes)."""
        return getattr(self.index.store, "through", None)

    @property
    def agent_view(self) -> AgentArchive:
        """The index as the agents' tools read it."""
        from mediaindex.agents.tools import Archive as AgentArchive

        return AgentArchive(self.index, self.embedder, self.settings.vision)

    # --- reading ----------------------------------------------------------------------------------
    def search(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
               mode: str = "hybrid", moments: bool = True, min_confidence: str | None = None) -> list[Hit]:
        """Moments (or, `moments=False`, raw segments) for a plain-language query, best first."""
        from mediaindex.search.searcher import Searcher

        return Searcher(self.index, self.embedder, self.settings.vision).text(
            query, limit=limit, filters=filters, mode=mode, moments=moments,  # type: ignore[arg-type]
            min_confidence=min_confidence)

    def moments(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
                mode: str = "hybrid", moments: bool = True, min_confidence: str | None = None,
                picture: np.ndarray | None = None) -> list[dict[str, Any]]:
        """`search` (or, given a `picture`, `search_image`) as JSON-ready dicts: what a `RemoteArchive` gives."""
        if picture is not None:
            return [h.to_dict() for h in self.search_image(picture, limit, filters, min_confidence)]
        return [h.to_dict() for h in self.search(query, limit, filters, mode=mode, moments=moments,
                                                 min_confidence=min_confidence)]

    def search_files(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
                     mode: str = "hybrid", min_confidence: str | None = None, per_file: int = 3) -> list[FileMoments]:
        """The files that hold a match, best first, each with its `per_file` best moments and how many it has."""
        from mediaindex.search.searcher import Searcher

        return Searcher(self.index, self.embedder, self.settings.vision).files(
            query, limit, filters, mode=mode, min_confidence=min_confidence, per_file=per_file)  # type: ignore[arg-type]

    def file_moments(self, query: str | None, limit: int = 10, filters: SearchFilters | None = None, *,
                     mode: str = "hybrid", min_confidence: str | None = None, per_file: int = 3) -> list[dict[str, Any]]:
        """`search_files` as JSON-ready dicts: what a `RemoteArchive` gives."""
        return [f.to_dict() for f in self.search_files(query, limit, filters, mode=mode, min_confidence=min_confidence,
                                                       per_file=per_file)]

    def search_image(self, picture: np.ndarray, limit: int = 10, filters: SearchFilters | None = None,
                     min_confidence: str | None = None) -> list[Hit]:
        """Shots that look like `picture`."""
        from mediaindex.search.searcher import Searcher

        return Searcher(self.index, self.embedder, self.settings.vision).image(picture, limit=limit, filters=filters,
                                                                               min_confidence=min_confidence)

    def like(self, video_id: str, t: float, limit: int = 10, filters: SearchFilters | None = None,
             min_confidence: str | None = None) -> list[Hit]:
        """Shots that look like the indexed shot of `video_id` at `t` seconds (its frame, as its thumbnail keeps
        it); that shot itself is left out."""
        from mediaindex.models.images import load_image
        from mediaindex.search.searcher import Searcher

        shots = [s for s in self.segments(video_id, "visual") if s.get("thumbnail") and s["start"] <= t <= s["end"]]
        if not shots:
            raise MediaIndexError(f"no shot of that file at {t:g} s has a picture in the index (a file without "
                                  "video, or a time past its end)")
        shot = min(shots, key=lambda s: s["end"] - s["start"])
        picture = load_image(self.settings.thumbs_dir / shot["thumbnail"])
        return Searcher(self.index, self.embedder, self.settings.vision).image(
            picture, limit, filters, min_confidence,
            leave_out=lambda h: (h.video_id, h.start, h.end) == (video_id, shot["start"], shot["end"]))

    def stats(self) -> dict[str, Any]:
        """Files (and how many an earlier version of the stages indexed), segments (in all and by kind), and the
        vector store's own numbers."""
        catalog = self.index.catalog
        stats = {"files": catalog.count(), "files_by_earlier_version": catalog.earlier_analysis(ANALYSIS_VERSION),
                 "files_missing": len(self.missing()), **self.index.store.stats()}
        for modality in MODALITIES:
            stats[f"{modality}_segments"] = self.index.store.count(SearchFilters(modality=modality))
        return stats

    def files(self) -> list[VideoRecord]:
        return self.index.catalog.all()

    def video(self, video_id: str) -> VideoRecord | None:
        """The indexed file with this exact video id."""
        return self.index.catalog.get(video_id)

    def find(self, ref: str) -> VideoRecord | None:
        """A video id, a unique id prefix, or the path / file name it was ingested from."""
        return self.agent_view.resolve(ref)

    def stored_summary(self, video: str) -> VideoSummary | None:
        """The summary with chapters made at ingest (with summaries), if one was."""
        from mediaindex.agents.stored import stored_summary

        return stored_summary(self.agent_view, video)

    def segments(self, video_id: str, modality: str | None = None) -> list[dict[str, Any]]:
        """A file's segments (of one modality, or all), in time order."""
        return self.index.store.segments_of(video_id, modality=modality)

    def speech(self, video_id: str, track: int | None = None) -> list[dict[str, Any]]:
        """What was said in a file, in time order: its default audio track's speech segments, or where nothing was
        heard, its subtitles in one language (`segments.standing_for_speech`), so that a transcript reads once.
        `track` (1, 2, …): that audio track's speech instead (`MediaIndexError` for one it lacks or that was not
        transcribed)."""
        record = self.index.catalog.get(video_id)
        speech = self.segments(video_id, "speech")
        if track is not None and record is not None:
            tracks = record.probe.get("audio_tracks") or []
            try:
                transcribed = record.probe.get("transcribed_tracks") or self.settings.speech.audio_tracks
                stream = audio_track_index(tracks, track, transcribed)
            except ValueError as exc:
                raise MediaIndexError(f"{record.source}: {exc}") from None
            if stream != (track_order(tracks) or [0])[0]:
                return [s for s in speech if of_audio_track((s.get("extra") or {}).get(TRACK_FIELD), track)]
        heard = default_track(speech, lambda s: (s.get("extra") or {}).get(TRACK_FIELD))
        if heard:
            return heard
        return standing_for_speech(self.segments(video_id, SUBTITLE), lambda s: s.get("language"),
                                   record.language if record is not None else None)

    def transcript(self, video: str, track: int | None = None) -> Transcript | None:
        """The speech segments (of audio track `track`, else the default one) and facts of an indexed file
        (`indexed_named`), or None."""
        record = indexed_named(self.index.catalog, video)
        if record is None:
            return None
        return self.speech(record.video_id, track), {"source": record.source, "video_id": record.video_id,
                                              "language": record.language, "duration": record.duration}

    # --- writing ----------------------------------------------------------------------------------
    def ingest(self, request: IngestRequest, hooks: IngestHooks | None = None,
               pipeline: StagePipeline | None = None) -> IngestReport:
        """Run an ingest job into this index (the stages on threads here for a small job, else on Ray)."""
        from mediaindex.service.run import ingest as run_ingest

        return run_ingest(request, self.index, pipeline, hooks)

    def remove(self, video_ids: Sequence[str]) -> list[VideoRecord]:
        """Take these files out of the index (segments, summary and chapters, thumbnails) and return what was
        removed; an id no longer indexed is passed over. An uploaded file, a copy only the index refers to, is
        deleted with its entry; a file anywhere else stays where it is."""
        removed: list[VideoRecord] = []
        uploads = self.settings.upload_dir.resolve()
        for video_id in video_ids:
            record = self.index.catalog.get(video_id)
            if record is None:
                continue
            self.index.remove_video(video_id)
            removed.append(record)
            if Path(record.source).parent.parent == uploads:
                shutil.rmtree(Path(record.source).parent, ignore_errors=True)
        return removed

    def missing(self, under: Sequence[Path] | None = None) -> list[VideoRecord]:
        """The indexed files no longer at the path they were ingested from (with `under`: those ingested from
        under these folders)."""
        from mediaindex.index.naming import under_folders

        if under is not None and not any(Path(p).is_dir() for p in under):
            return []
        gone = [r for r in self.files() if not os.path.exists(r.source)]
        return gone if under is None else under_folders(gone, under)

    def optimize(self) -> bool:
        """Build HNSW graphs and merge segments; False when there was nothing to do."""
        return self.index.store.optimize()

    # --- agents -----------------------------------------------------------------------------------
    def summarize(self, video: str, recompute: bool = False, on_event: OnEvent | None = None) -> JobOutcome:
        """A summary job for one indexed video, run here to its end."""
        from mediaindex.agents.jobs import submit_summarize

        return self.run_job(submit_summarize(self.settings, video, recompute), "summarize", on_event)

    def ask(self, question: str, video: str | None = None, on_event: OnEvent | None = None,
            where: tuple[tuple[str, str], ...] = ()) -> JobOutcome:
        """A question job, run here to its end."""
        return self.run_job(self.submit_ask(question, video, where), "ask", on_event)

    def submit_ask(self, question: str, video: str | None = None, where: tuple[tuple[str, str], ...] = ()) -> str:
        """A pending question job, for `run_job` (over the files with `where`'s metadata values, if given)."""
        from mediaindex.agents.jobs import submit_ask

        return submit_ask(self.settings, question, video, where)

    def cancel_job(self, job_id: str) -> None:
        """Ask a job to stop (a summary or question before its next language-model call); one that has ended
        stays as it ended."""
        store = JobStore.of(self.settings)
        try:
            store.request_cancel(job_id)
        except JobFinished:
            pass
        finally:
            store.close()

    def run_job(self, job_id: str, kind: str, on_event: OnEvent | None = None) -> JobOutcome:
        """Run a summary or question job already in the job store; the language model starts in a Ray actor
        (Ray is started or joined here) only when the job needs it."""
        from mediaindex.agents.events import ignore
        from mediaindex.agents.jobs import SUMMARIZE, run_ask_job, run_summarize_job

        run = run_summarize_job if kind == SUMMARIZE else run_ask_job
        return JobOutcome.of(run(self.settings, job_id, archive=self.agent_view, on_event=on_event or ignore,
                                 start_ray=self._start_ray))

    def _start_ray(self, settings: Settings) -> None:
        import ray

        from mediaindex.workers.runtime import ensure_ray

        if not ray.is_initialized():
            ensure_ray(settings)
            self._started_ray = True

    # --- the index folder itself ------------------------------------------------------------------
    @staticmethod
    def exists(settings: Settings) -> bool:
        return index_exists(settings)

    @staticmethod
    def may_hold(settings: Settings, video: str) -> bool:
        """Whether the index may hold this file (`indexed_named`): a cheap look in its catalog, without
        opening the index and its embedder; False where there is no index."""
        if not index_exists(settings):
            return False
        from mediaindex.index.catalog import Catalog

        db = settings.index_dir / "catalog.db"
        if not db.exists():
            return True  # the index's own open answers
        catalog = Catalog(db)
        try:
            return indexed_named(catalog, video) is not None
        finally:
            catalog.close()

    @staticmethod
    def anything_to_reset(settings: Settings) -> bool:
        index_dir = settings.index_dir
        return index_dir.exists() and any((index_dir / name).exists() for name in
                                          (SCHEMA_FILE, "catalog.db", "qdrant", "thumbs", RESET_MARKER))

    @staticmethod
    def reset(settings: Settings) -> None:
        """Delete the index (vectors, catalog, thumbnails), holding its lease: an index another process has open
        is never deleted under it, and none opens it midway. A stop at any point leaves the old index or none."""
        lease = _lease_for_reset(settings)
        try:
            if settings.index.backend == "server" and settings.index.url:
                from mediaindex.index.server_store import make_client

                try:
                    client = make_client(settings.index.url, settings.index.api_key, settings.index.timeout)
                    if client.collection_exists(settings.index.collection):
                        client.delete_collection(settings.index.collection)
                    client.close()
                except Exception as exc:
                    raise ResetError(f"cannot delete the collection {settings.index.collection!r} at "
                                     f"{settings.index.url}: {exc}") from exc
            try:
                reset_index(settings.index_dir)
            except OSError as exc:
                raise ResetError(f"the index at {settings.index_dir} could not be deleted completely ({exc}); run "
                                 "`mediaindex index reset` again (the rest is deleted then)") from exc
        finally:
            lease.release()


def _lease_for_reset(settings: Settings) -> IndexLease:
    from mediaindex.index.holder import read_holder
    from mediaindex.index.lease import IndexLease

    lease = IndexLease.try_take(settings.index_dir)
    if lease is None:
        holder = read_holder(settings.index_dir)
        who = holder.describe() if holder else "another process"
        raise ResetError(f"the index at {settings.index_dir} is held by {who}: stop it first, then reset")
    return lease


@dataclass
class FreshTranscript:
    segments: list[dict[str, Any]]
    meta: dict[str, Any]
    notes: list[str]


def transcribe_now(settings: Settings, path: Path, on_loading: Callable[[], None] | None = None,
                   on_progress: Callable[[float], None] | None = None,
                   on_start: Callable[[float], None] | None = None, track: int | None = None) -> FreshTranscript:
    """Transcribe a file that is not indexed, its default audio track (or audio track `track`: 1, 2, …); nothing
    is written. `on_start` hears the file's duration, `on_loading` that the model loads, `on_progress` the seconds
    of audio transcribed so far."""
    from mediaindex.media.probe import probe
    from mediaindex.pipeline.stages.speech import SpeechStage

    source = str(path.resolve())
    info = probe(source)
    if not info.has_audio:
        raise MediaError(source, "has no audio track: nothing to transcribe")
    try:  # any of its tracks can be transcribed now
        stream = chosen_track(info.audio_tracks, track)
    except ValueError as exc:
        raise MediaError(source, str(exc)) from None
    if on_start:
        on_start(info.duration or 0.0)
    if on_loading:
        on_loading()
    result = SpeechStage(settings).transcribe_file(source, info, on_progress=on_progress, only=stream)
    if result.failure:
        raise MediaError(source, result.failure)
    mark_chapters(result.segments, info.chapters)  # as an indexed file's: its text transcript heads each chapter
    return FreshTranscript([s.payload() for s in result.segments],
                           {"source": source, "video_id": None, "language": result.language,
                            "duration": info.duration},
                           [n for n in result.notes if n != "no speech found"])


def indexed_named(catalog: Catalog | PerThreadCatalog, video: str) -> VideoRecord | None:
    """The indexed file `video` names: a file on disk by its path alone (one not indexed is None, to be read
    afresh); otherwise a video id or its start, the path it was ingested from, or its file name
    (`index.naming`). A name that fits several indexed files is refused, naming them."""
    path = Path(video).expanduser()
    if path.is_file():
        return catalog.by_source(str(path.resolve()))
    return catalog.get(video) or one_file_named(catalog.all(), video)
