"""A keyword check for languages written with accents: Debian's French and Spanish manual pages, asked without them.

People type "repertoires" for "répertoires" and "cancion" for "canción"; keyword search folds Latin accents on both
sides (:mod:`ragstep.retrieval.latin_fold`). This builds two BEIR-layout sets over the same corpus, the pages of
``/usr/share/man/fr/man1`` and ``/usr/share/man/es/man1`` whose command starts with a-l (those from n to z are left
for a held-out check), rendered to text with groff:

* ``man-fr-es``: questions as a user types them without accents ("changer le proprietaire d'un fichier");
* ``man-fr-es-accents``: the same questions with their accents.

Each question was written by reading the pages (a paraphrase of what a page is for), labelled with the pages that
answer it. No vectors: the check is of the keyword side (``--runs bm25``). Needs groff and the Debian packages
``manpages-fr`` and ``manpages-es`` (plus those whose pages they translate). Run::

    python -m ragstep.bench.accent_sets OUT_DIR
    ragstep bench quality --set OUT_DIR/man-fr-es --runs bm25
    ragstep bench quality --set OUT_DIR/man-fr-es-accents --runs bm25
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import unicodedata
from pathlib import Path

from ragstep.bench.public_sets import write_set

MAN_ROOT = Path("/usr/share/man")
#: (question with its accents, the pages that answer it) per language.
QUESTIONS: dict[str, list[tuple[str, list[str]]]] = {
    "fr": [
        ("quelle commande affiche l'architecture matérielle de la machine", ["arch"]),
        ("vérifier l'empreinte BLAKE2 d'un fichier", ["b2sum"]),
        ("encoder des données en base64", ["base64", "basenc"]),
        ("enlever le suffixe d'un nom de fichier", ["basename"]),
        ("modifier la durée de validité d'un mot de passe", ["chage", "expiry"]),
        ("changer le propriétaire d'un fichier", ["chown", "chgrp"]),
        ("modifier le contexte de sécurité d'un fichier", ["chcon"]),
        ("attributs temps réel d'un processus", ["chrt"]),
        ("changer l'interpréteur de commandes initial", ["chsh"]),
        ("comparer deux fichiers triés", ["comm"]),
        ("découper un fichier en sections", ["csplit"]),
        ("convertir une date grégorienne en date discordienne", ["ddate"]),
        ("espace occupé par les systèmes de fichiers", ["df"]),
        ("tampon circulaire du noyau", ["dmesg"]),
        ("vérifier les dépendances de construction d'un paquet", ["dpkg-checkbuilddeps"]),
        ("exécuter un programme dans un environnement modifié", ["env"]),
        ("préallouer de l'espace pour un fichier", ["fallocate"]),
        ("déterminer le type d'un fichier", ["file"]),
        ("quantité de mémoire libre", ["free"]),
        ("priorité d'ordonnancement des entrées sorties", ["ionice"]),
        ("afficher les dépendances des objets partagés", ["ldd"]),
        ("compiler les définitions de paramètres régionaux", ["localedef"]),
        ("liste des derniers utilisateurs connectés", ["last", "lastb"]),
    ],
    "es": [
        ("estadísticas sobre el tiempo de conexión de los usuarios", ["ac"]),
        ("buscar descripciones de páginas de manual", ["apropos"]),
        ("lenguaje de cálculo de precisión arbitraria", ["bc"]),
        ("compresor de archivos por ordenación de bloques", ["bzip2", "bunzip2", "bzcat", "bzip2recover"]),
        ("comparar dos archivos ordenados línea por línea", ["comm"]),
        ("utilización del espacio de disco", ["df"]),
        ("configuración de colores para ls", ["dircolors"]),
        ("eliminar la última parte de un nombre de archivo", ["dirname"]),
        ("volcar las tablas de traducción del teclado", ["dumpkeys"]),
        ("evaluar expresiones", ["expr"]),
        ("identificador numérico del equipo", ["hostid"]),
        ("información sobre órdenes ejecutadas", ["lastcomm"]),
        ("fichero semáforo condicional", ["lockfile"]),
        ("nombre de inicio de sesión del usuario", ["logname"]),
    ],
}


def render(page: Path) -> str:
    """A manual page as plain text (groff, UTF-8 input, no hyphenation, no overstrike), whitespace collapsed."""
    source = gzip.decompress(page.read_bytes()) if page.suffix == ".gz" else page.read_bytes()
    out = subprocess.run(
        ["groff", "-k", "-rHY=0", "-Tutf8", "-mandoc", "-P-cbou"],
        input=source,
        capture_output=True,
        check=False,
        env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin"},
    )
    return " ".join(out.stdout.decode("utf-8", "replace").split())


def unaccented(question: str) -> str:
    """The question as typed without accents: each letter's combining marks dropped (Unicode decomposition; French
    and Spanish need nothing else)."""
    return unicodedata.normalize(
        "NFC", "".join(c for c in unicodedata.normalize("NFD", question) if not unicodedata.combining(c))
    )


def build(out_dir: Path, man_root: Path = MAN_ROOT) -> list[Path]:
    corpus: list[tuple[str, str, str]] = []
    for lang in QUESTIONS:
        folder = man_root / lang / "man1"
        if not folder.is_dir():
            raise SystemExit(f"no {folder}: install the Debian package manpages-{lang}")
        for page in sorted(folder.glob("[a-l]*.1*")):
            name = page.name.split(".1")[0]
            text = render(page)
            if text:
                corpus.append((f"{lang}/{name}", name, text))
    made = []
    for suffix, accents in (("", False), ("-accents", True)):
        queries, qrels = [], []
        for lang, questions in QUESTIONS.items():
            for i, (question, pages) in enumerate(questions, 1):
                qid = f"{lang}{i}"
                queries.append((qid, question if accents else unaccented(question)))
                qrels += [(qid, f"{lang}/{page}", 1) for page in pages]
        source = (
            f"Debian manual pages in French and Spanish ({man_root}/{{fr,es}}/man1, commands a-l), rendered with "
            f"groff; questions written from the pages, {'with' if accents else 'without'} their accents. Built by "
            "`python -m ragstep.bench.accent_sets`."
        )
        made.append(write_set(out_dir / f"man-fr-es{suffix}", corpus, queries, qrels, source, embed=False))
    return made


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ragstep.bench.accent_sets OUT_DIR", file=sys.stderr)
        return 2
    for folder in build(Path(args[0])):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
