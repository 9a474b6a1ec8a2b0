"""A small C++ tokenizer that keeps every character of the input.

Concatenating the ``text`` of all tokens gives the input back exactly, so a translation can rewrite single
tokens and leave everything else (spacing, comments, line breaks) untouched. It knows just enough C++ to
tell code from comments, string and character literals, numbers and ``#include`` header names.
"""
from __future__ import annotations

from dataclasses import dataclass

WS = "ws"  # spaces, tabs and backslash-newline line continuations
NL = "nl"  # a line break that ends a logical line
COMMENT = "comment"
IDENT = "ident"
NUMBER = "number"
STRING = "string"
CHAR = "char"
HEADER = "header"  # <name> after #include
PUNCT = "punct"

TRIVIA = (WS, NL, COMMENT)

_PUNCTUATORS = sorted(
    [
        "...", "<<=", ">>=", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
        "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", ".*",
    ],
    key=len,
    reverse=True,
)
_STRING_PREFIXES = ("u8", "u", "U", "L")


class LexError(ValueError):
    """Input that the tokenizer cannot split (an unterminated comment or literal)."""

    def __init__(self, message: str, line: int, col: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.col = col


@dataclass(frozen=True)
class Token:
    """One token: its kind, its exact text and where it starts (1-based line and column)."""

    kind: str
    text: str
    line: int
    col: int


def _is_ident_start(c: str) -> bool:
    return c.isalpha() or c == "_" or c == "$"


def _is_ident_char(c: str) -> bool:
    return c.isalnum() or c == "_" or c == "$"


def tokenize(src: str) -> list[Token]:
    """Split ``src`` into tokens; raises LexError on an unterminated comment or literal."""
    tokens: list[Token] = []
    i, n = 0, len(src)
    line, col = 1, 1
    at_line_start = True  # only trivia since the last line break
    directive: list[str] = []  # significant tokens of the current directive line

    def advance(text: str) -> None:
        nonlocal line, col
        newlines = text.count("\n")
        if newlines:
            line += newlines
            col = len(text) - text.rfind("\n")
        else:
            col += len(text)

    def emit(kind: str, end: int) -> None:
        nonlocal i
        text = src[i:end]
        tokens.append(Token(kind, text, line, col))
        advance(text)
        i = end

    def quoted_end(start: int, quote: str) -> int:
        """Index just past the literal whose opening quote is at ``start``."""
        j = start + 1
        while j < n:
            c = src[j]
            if c == "\\":
                j += 2
                continue
            if c == quote:
                return j + 1
            if c == "\n":
                break
            j += 1
        kind = "string" if quote == '"' else "character"
        raise LexError(f"unterminated {kind} literal", line, col)

    while i < n:
        c = src[i]
        if c == "\n":
            emit(NL, i + 1)
            at_line_start = True
            directive = []
            continue
        if c == "\\" and src.startswith("\n", i + 1):
            emit(WS, i + 2)
            continue
        if c == "\\" and src.startswith("\r\n", i + 1):
            emit(WS, i + 3)
            continue
        if c in " \t\r\f\v":
            j = i
            while j < n and src[j] in " \t\r\f\v":
                j += 1
            emit(WS, j)
            continue
        if src.startswith("//", i):
            j = i
            while j < n and src[j] != "\n":
                if src[j] == "\\" and src.startswith("\n", j + 1):  # a continued line comment
                    j += 2
                    continue
                j += 1
            emit(COMMENT, j)
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise LexError("unterminated /* comment", line, col)
            emit(COMMENT, j + 2)
            continue

        starts_directive = at_line_start and c == "#"
        at_line_start = False
        if directive[:2] == ["#", "include"] and len(directive) == 2 and c == "<":
            j = src.find(">", i + 1)
            if j < 0 or "\n" in src[i:j]:
                raise LexError("unterminated header name", line, col)
            emit(HEADER, j + 1)
            directive.append("<header>")
            continue
        if _is_ident_start(c):
            j = i + 1
            while j < n and _is_ident_char(src[j]):
                j += 1
            word = src[i:j]
            if j < n and src[j] == '"' and word in ("R", "u8R", "uR", "UR", "LR"):
                close = src.find("(", j + 1)
                if close < 0:
                    raise LexError("malformed raw string literal", line, col)
                delim = src[j + 1 : close]
                end = src.find(")" + delim + '"', close + 1)
                if end < 0:
                    raise LexError("unterminated raw string literal", line, col)
                emit(STRING, end + len(delim) + 2)
            elif j < n and src[j] in "\"'" and word in _STRING_PREFIXES:
                emit(STRING if src[j] == '"' else CHAR, quoted_end(j, src[j]))
            else:
                emit(IDENT, j)
            if directive:
                directive.append(word)
            continue
        if c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isdigit()):
            j = i + 1
            while j < n:
                d = src[j]
                if d in "+-" and src[j - 1] in "eEpP":
                    j += 1
                elif _is_ident_char(d) or d == ".":
                    j += 1
                elif d == "'" and j + 1 < n and _is_ident_char(src[j + 1]):  # digit separator
                    j += 2
                else:
                    break
            emit(NUMBER, j)
            if directive:
                directive.append("<number>")
            continue
        if c == '"':
            emit(STRING, quoted_end(i, '"'))
            continue
        if c == "'":
            emit(CHAR, quoted_end(i, "'"))
            continue
        for p in _PUNCTUATORS:
            if src.startswith(p, i):
                emit(PUNCT, i + len(p))
                break
        else:
            emit(PUNCT, i + 1)
        if starts_directive:
            directive = ["#"]
        elif directive:
            directive.append(tokens[-1].text)
    return tokens
