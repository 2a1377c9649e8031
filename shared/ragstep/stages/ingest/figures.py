"""The pictures inside a document (:mod:`ragstep.parsers.figures`): stored, read and described by the parse stage,
attached to chunks by the chunk stage.

In the parse stage (:func:`read_figures`), for each figure of the parsed document, at most
``RAGSTEP_IMAGE_MAX_PER_FILE``:

1. **Stored**, content-addressed, at ``images/<kb id>/<knowledge id>/<sha256><ext>``; its placeholder's target in the
   text becomes the picture's URL (:func:`~ragstep.stages.ingest.products.image_url`, which ``GET`` serves), so the
   parsed text, the chunks and the answers' references all point at something a client can show.
2. **OCR'd** with the same engine and time limit as scanned pages. Text found goes into the text stream after the
   block that holds the picture (never inside a table row or a list item), wrapped in ``<!-- ocr [page N] image
   <name> -->`` markers: the chunker cuts it with the rest, offsets point into the stored text, and chunks made mostly
   of it become ``IMAGE_OCR`` chunks naming the page and the picture.
3. **Captioned** by the vision model when one is configured (``RAGSTEP_VISION_MODEL``): at most
   ``RAGSTEP_VISION_MAX_IMAGES`` pictures, each within ``RAGSTEP_VISION_TIMEOUT_S``, all within
   ``RAGSTEP_VISION_MAX_S``. A caption that fails or runs out of time is left out with a warning in the trace; the
   document is indexed all the same. Captions are not put in the text: they are what the model says, not what the
   document says, so they become chunks of their own (``IMAGE_CAPTION``, WeKnora's VLM step) whose offsets are the
   picture's placeholder.

What the chunk stage needs goes to the run's ``figures.json``; :func:`attach_figures` gives every chunk that shows a
picture (its link, or text read from it) the picture's ``image_info`` (URL, caption, OCR text), and
:func:`caption_chunks` makes the caption chunks.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ragstep import deadline
from ragstep.errors import InputError, RagstepError
from ragstep.models import Chunk, ChunkType, ImageInfo, Knowledge, KnowledgeBase
from ragstep.parsers.ocr import INSTALL_HINT, OcrOptions, ocr_image, wrap
from ragstep.stages.ingest.products import image_blob_key, image_url

if TYPE_CHECKING:
    from ragstep.context import Context
    from ragstep.parsers import ParsedDocument
    from ragstep.parsers.figures import Figure

CAPTION_PROMPT = (
    "Write a caption for this picture from a document, for a search index: one or two sentences saying what it "
    "shows, with the words, numbers and labels it contains. Write in the language of the text in the picture "
    "(English when it has none). Answer with the caption only."
)
CAPTION_MAX_TOKENS = 200
#: The run product the chunk stage reads the figures from.
FIGURES_JSON = "figures.json"
#: Caption failures in a row after which a file's remaining pictures are not sent.
_FAILURES_IN_A_ROW = 2
#: Types the vision providers read (OpenAI's image_url, Bedrock's image block): TIFF and BMP are OCR'd only.
_VISION_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class StoredFigure:
    """A figure as the chunk stage sees it (one entry of ``figures.json``)."""

    name: str  # <sha256><ext>
    url: str
    page: int | None
    alt: str
    ocr_text: str = ""
    caption: str = ""
    model: str = ""  # the vision model that wrote the caption

    @property
    def info(self) -> ImageInfo:
        return ImageInfo(url=self.url, caption=self.caption, ocr_text=self.ocr_text)


@dataclass(slots=True)
class FigureReport:
    """What :func:`read_figures` did: the new text, the figures, and warnings for the trace."""

    text: str
    figures: list[StoredFigure]
    warnings: list[str]


def read_figures(doc: ParsedDocument, kb: KnowledgeBase, knowledge_id: str, ctx: Context) -> FigureReport:
    """Store, OCR and caption ``doc``'s figures (see the module docstring); the text with their URLs and OCR text."""
    settings = ctx.settings
    ocr = OcrOptions(settings.ocr_engine, settings.ocr_languages, settings.ocr_timeout_s, settings.ocr_max_pages)
    # The parsers hand over at most RAGSTEP_IMAGE_MAX_PER_FILE; a picture past it stays a placeholder.
    figures = [f for f in doc.figures if f"]({f.ref})" in doc.text][: settings.image_max_per_file]
    report = FigureReport(doc.text, [], [])
    if ocr.enabled and shutil.which("tesseract") is None:  # said once, not once per picture
        report.warnings.append(f"{doc.filename}: its pictures are stored without their text; {INSTALL_HINT}")
        ocr = replace(ocr, engine="none")
    captions = _Captioner(ctx)
    for figure in figures:
        name = hashlib.sha256(figure.data).hexdigest() + figure.extension
        key = image_blob_key(kb.id, knowledge_id, name)
        if not ctx.blobs.exists(key):
            ctx.blobs.put(key, figure.data, figure.media_type)
        url = image_url(kb.id, knowledge_id, name)
        read = _ocr(figure, doc.filename, ocr, report.warnings)
        caption = captions.caption(figure, report.warnings)
        report.text = _place(report.text, figure.ref, url, wrap(read, figure.page, name) if read else "")
        model = captions.name if caption else ""
        report.figures.append(StoredFigure(name, url, figure.page, figure.alt, read, caption, model))
    report.warnings = list(dict.fromkeys(report.warnings))  # one line per distinct failure
    return report


def _ocr(figure: Figure, filename: str, options: OcrOptions, warnings: list[str]) -> str:
    """The text OCR reads in the picture; "" (with a warning when the engine failed) when none."""
    if not options.enabled:
        return ""
    where = f"page {figure.page}" if figure.page is not None else figure.ref
    try:
        return ocr_image(figure.data, f"{filename} (picture on {where})", options)
    except InputError as exc:  # the engine missing, a timeout, an unreadable picture: the document still counts
        warnings.append(exc.message)
        return ""


class _Captioner:
    """Captions within the count and time budgets; failures become warnings."""

    def __init__(self, ctx: Context) -> None:
        settings = ctx.settings
        self.model = ctx.vision_model
        self.name = self.model.name if self.model is not None else ""
        self.left = settings.vision_max_images
        self.per_image_s = settings.vision_timeout_s
        self.until = time.monotonic() + settings.vision_max_s
        self.stopped = False
        self.failures = 0  # in a row

    def caption(self, figure: Figure, warnings: list[str]) -> str:
        if self.model is None or self.stopped or figure.media_type not in _VISION_TYPES:
            return ""
        if self.left <= 0 or time.monotonic() >= self.until:
            self.stopped = True
            spent = "RAGSTEP_VISION_MAX_IMAGES / RAGSTEP_VISION_MAX_S"
            warnings.append(f"captions stopped: the file's caption budget is spent ({spent})")
            return ""
        self.left -= 1
        try:
            with deadline.deadline_at(min(time.monotonic() + self.per_image_s, self.until)):
                text = self.model.describe(
                    figure.data, figure.media_type, CAPTION_PROMPT, max_tokens=CAPTION_MAX_TOKENS
                )
        except RagstepError as exc:
            warnings.append(f"no caption for a picture: {exc.message}")
            self.failures += 1
            if self.failures >= _FAILURES_IN_A_ROW:  # a model that is down would spend the whole budget failing
                self.stopped = True
                warnings.append(f"captions stopped: the vision model failed {self.failures} times in a row")
            return ""
        self.failures = 0
        return " ".join(text.split())


def _place(text: str, ref: str, url: str, addition: str) -> str:
    """``text`` with the placeholder target ``ref`` replaced by ``url`` (everywhere: a DOCX may place one picture
    twice) and ``addition`` after the block that holds its first placeholder."""
    at = text.find(f"]({ref})")
    if at < 0:
        return text
    text = text.replace(f"]({ref})", f"]({url})")
    if not addition:
        return text
    end = text.find("\n\n", at)
    end = len(text) if end < 0 else end
    return f"{text[:end]}\n\n{addition}{text[end:]}"


# -- the chunk stage's half ------------------------------------------------------------------------------------------


def figures_to_json(figures: list[StoredFigure]) -> list[dict[str, Any]]:
    return [asdict(f) for f in figures]


def figures_from_json(items: list[dict[str, Any]]) -> list[StoredFigure]:
    return [StoredFigure(**item) for item in items]


def attach_figures(chunks: list[Chunk], figures: list[StoredFigure]) -> list[Chunk]:
    """Each chunk that links a picture, or holds text read from it, carries the picture's ``image_info``."""
    if not figures:
        return chunks
    out = []
    for chunk in chunks:
        shown = [f for f in figures if f.url in chunk.content or f"image {f.name} -->" in chunk.content]
        if chunk.chunk_type == ChunkType.IMAGE_OCR and "image" in chunk.metadata:
            named = next((f for f in figures if f.name == chunk.metadata["image"]), None)
            if named is not None:
                chunk = chunk.model_copy(update={"metadata": {**chunk.metadata, "image": named.url}})
                shown = [named, *(f for f in shown if f is not named)]
        if shown:
            chunk = chunk.model_copy(update={"image_info": [f.info for f in shown]})
        out.append(chunk)
    return out


def caption_chunks(
    kb: KnowledgeBase, knowledge: Knowledge, text: str, chunks: list[Chunk], figures: list[StoredFigure]
) -> list[Chunk]:
    """One ``IMAGE_CAPTION`` chunk per captioned picture, numbered after ``chunks`` (one index left free, so the
    merge stage never takes a caption for the next passage of the text). Its offsets are the picture's placeholder
    in the text; ``parent_id`` is the chunk that shows the picture."""
    out = []
    index = (chunks[-1].chunk_index + 2) if chunks else 0
    for figure in figures:
        if not figure.caption:
            continue
        start = text.find(f"]({figure.url})")
        start = max(text.rfind("![", 0, start), 0) if start >= 0 else 0
        end = text.find(")", start) + 1 if start >= 0 else 0
        parent = next((c.id for c in chunks if c.start_at <= start < c.end_at), None)
        metadata: dict[str, Any] = {"image": figure.url, "source": "vision", "model": figure.model}
        if figure.page is not None:
            metadata["page"] = figure.page
        out.append(
            Chunk(
                id=f"{knowledge.id}-{index}",
                parent_id=parent,
                knowledge_id=knowledge.id,
                knowledge_base_id=kb.id,
                content=figure.caption,
                chunk_index=index,
                start_at=start,
                end_at=max(end, start),
                chunk_type=ChunkType.IMAGE_CAPTION,
                tag_id=knowledge.tag_id,
                knowledge_title=knowledge.title,
                knowledge_filename=knowledge.filename,
                metadata=metadata,
                image_info=[figure.info],
            )
        )
        index += 1
    return out
