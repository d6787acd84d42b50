"""Write docs/cli.md from the command line's own argument parsers.

    python scripts/cli_reference.py            # (re)write docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 if docs/cli.md is stale

It imports :mod:`scoped_a2a.cli.parser`, walks its argparse parser (every subcommand, each of its
argument groups with the group's one-line summary, every option with its help and default) and
formats the Markdown itself, so the output does not depend on the
terminal's width or on the environment (defaults read from ``SCOPED_A2A_*`` variables are shown
as unset).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "docs" / "cli.md"

HEADER = """\
# Command-line reference

Generated from the argument parsers by `scripts/cli_reference.py`; do not edit by hand. After
changing an option, run `python scripts/cli_reference.py` (CI runs it with `--check`).

Every command is `python -m scoped_a2a COMMAND ...` (or `scoped-a2a COMMAND ...` once installed).
"""

def _parser() -> argparse.ArgumentParser:
    # Some defaults come from the environment when the parser is built: build it without them.
    for name in [n for n in os.environ if n.startswith("SCOPED_A2A_")]:
        del os.environ[name]
    sys.path.insert(0, str(ROOT / "src"))
    from scoped_a2a.cli.parser import build_parser

    parser: argparse.ArgumentParser = build_parser()
    return parser


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each subcommand, in declaration order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _cell(text: str) -> str:
    """One table cell: one line, reST double backquotes as Markdown code, pipes escaped."""
    return " ".join(text.split()).replace("``", "`").replace("|", "\\|")


def _help(action: argparse.Action, prog: str) -> str:
    """The action's help with argparse's ``%(default)s``-style fields filled in."""
    if not action.help or action.help == argparse.SUPPRESS:
        if action.choices is not None:
            return "one of " + ", ".join(str(c) for c in action.choices)
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(str(c) for c in action.choices or ())
    return action.help % params


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return "off" if action.default is False else "on"
    default = action.default
    if default is None or default is argparse.SUPPRESS:
        return "-"
    if isinstance(default, list) and not default:
        return "none (repeatable)"
    return f"`{default}`"


def _synopsis(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    if action.nargs == 0:
        return ", ".join(f"`{o}`" for o in action.option_strings)
    if action.metavar is not None:
        value = str(action.metavar)
    elif action.choices is not None:
        value = "{" + ",".join(str(c) for c in action.choices) + "}"
    else:
        value = action.dest.upper()
    return ", ".join(f"`{o} {value}`" for o in action.option_strings)


def _paragraphs(text: str) -> list[str]:
    """Descriptions and epilogs as Markdown: each paragraph joined into one line, except a
    paragraph whose first line ends with ``:`` and whose other lines are indented: an indented
    list of ``CODE  meaning`` rows becomes a table, anything else a code block."""
    lines: list[str] = []
    for block in [b for b in text.strip("\n").split("\n\n") if b.strip()]:
        head, *rest = block.splitlines()
        if head.rstrip().endswith(":") and rest and all(r.startswith(" ") for r in rest):
            lines += [_cell(head[:1].upper() + head[1:]), ""]
            rows = [r.strip().split(None, 1) for r in rest]
            if all(len(r) == 2 and r[0].isdigit() for r in rows):
                lines += ["| status | meaning |", "|---|---|"]
                lines += [f"| {code} | {_cell(meaning)} |" for code, meaning in rows]
            else:
                lines += ["```", *(r.strip() for r in rest), "```"]
        else:
            lines.append(_cell(block))
        lines.append("")
    return lines


def _documented(action: argparse.Action) -> bool:
    """Whether the reference lists the argument: not --help, and not an internal option that
    ``--help`` hides (``help=argparse.SUPPRESS``, such as the --reuse-port that serve --workers
    passes to its children)."""
    return not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS


# argparse's own groups: their arguments are listed first, under no heading.
_UNTITLED = ("positional arguments", "options", "optional arguments")


def _groups(parser: argparse.ArgumentParser
            ) -> list[tuple[str, str, list[argparse.Action]]]:
    """(title, one-line summary, arguments) of each argument group that has arguments, as
    ``--help`` shows them; argparse's own groups (positionals, options) are merged into the
    first, untitled one."""
    untitled: list[argparse.Action] = []
    titled: list[tuple[str, str, list[argparse.Action]]] = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if _documented(a)]
        if not actions:
            continue
        if group.title in _UNTITLED:
            untitled += actions
        else:
            titled.append((group.title or "", group.description or "", actions))
    untitled.sort(key=lambda a: bool(a.option_strings))  # positionals first, as in usage
    return ([("", "", untitled)] if untitled else []) + titled


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    lines = [f"## `{name}`", ""]
    description = parser.description or ""
    words = " ".join(description.split()).lower()
    if summary and not words.startswith(summary.lower().rstrip(".")):
        lines += [_cell(summary[:1].upper() + summary[1:]) + ".", ""]
    lines += _paragraphs(description)
    actions = [a for a in parser._actions if _documented(a)]
    positionals = [a for a in actions if not a.option_strings]
    usage = " ".join([f"python -m scoped_a2a {name}", *(a.metavar or a.dest.upper()
                                                         for a in positionals),
                      "[options]" if len(positionals) < len(actions) else ""]).strip()
    lines += ["```", str(usage), "```", ""]
    for title, summary_line, group in _groups(parser):
        if title:
            lines += [f"### {_cell(title[:1].upper() + title[1:])}", ""]
        if summary_line:
            lines += [_cell(summary_line), ""]
        lines += ["| argument | default | meaning |", "|---|---|---|"]
        for action in group:
            lines.append(f"| {_cell(_synopsis(action))} | {_cell(_default(action))} | "
                         f"{_cell(_help(action, parser.prog))} |")
        lines.append("")
    lines += _paragraphs(parser.epilog or "")
    return lines


def render() -> str:
    parser = _parser()
    out = [HEADER]
    commands = _subcommands(parser)
    out += ["| command | what it does |", "|---|---|"]
    out += [f"| [`{name}`](#{name}) | {_cell(summary)} |" for name, summary, _ in commands]
    out.append("")
    for name, summary, sub in commands:
        out += _command(name, summary, sub)
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Write docs/cli.md from the CLI's parsers.")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if docs/cli.md differs from what would be written")
    p.add_argument("--file", type=Path, default=TARGET, help="the file (default: docs/cli.md)")
    args = p.parse_args(argv)
    target: Path = args.file
    text = render()
    if not args.check:
        target.write_text(text)
        return 0
    current = target.read_text() if target.exists() else ""
    if current == text:
        return 0
    diff = [ln for ln in difflib.unified_diff(current.splitlines(), text.splitlines(), n=0,
                                               lineterm="") if ln[:1] in "+-"
            and not ln.startswith(("+++", "---"))]
    hint = diff[0] if diff else "(whitespace)"
    print(f"{target.name} is stale ({len(diff)} lines differ, first: {hint!r}); "
          "run: python scripts/cli_reference.py", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
