"""Reading a YAML request body without letting it hurt the API.

A job file is untrusted input parsed in the API's event loop, so it is bounded before
anything is built from it, in two passes:

1. **Events** (``yaml.parse``: PyYAML's parser is a state machine, not recursive). The
   nesting depth, the number of nodes and of aliases are counted here, and a document
   over a limit is refused before a single Python object exists — deep nesting would
   otherwise overflow the composer's recursion, and a huge flat document would cost
   CPU for nothing. More than one document in the body is refused too.
2. **Composition and construction**, with ``yaml.SafeLoader`` (no Python tags, ever)
   extended to refuse what safe loading alone lets through: a key given twice (YAML says
   it is an error; PyYAML silently keeps the last), a key that is not a string (``1:``,
   ``null:``, ``[a]:``: no job field is named so, and JSON could not say it), and
   an **alias bomb** ("billion laughs"): aliases are allowed, but the document's size
   *with every alias expanded* is computed on the node graph (memoised, so it costs one
   visit per distinct node) and must stay under ``MAX_NODES``. PyYAML shares an alias's
   object rather than copying it, so the bomb is cheap to load — and explodes later, when
   the document is validated or turned into JSON. Measuring the expansion catches it
   where it is cheap to.

Every refusal is a ``YamlRefused`` whose message says what was wrong and where (line
and column); the route turns it into a 400 problem.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 32  # a job spec nests five levels; OpenPAI's deepest is about six
MAX_NODES = 50_000  # scalars, sequences and mappings, aliases expanded
MAX_ALIASES = 1_000
_MERGE_TAG = "tag:yaml.org,2002:merge"
# libyaml's parser when PyYAML was built with it (about ten times faster); same rules.
_LOADER_BASE: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YamlRefused(ValueError):
    """A body that is not one safe, plain YAML document; the message says why and where."""


def _where(mark: Any) -> str:
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _check_events(text: str) -> None:
    depth = nodes = aliases = documents = 0
    for event in yaml.parse(text, Loader=_LOADER_BASE):
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise YamlRefused(f"the body holds more than one YAML document{_where(event.start_mark)}")
        elif isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            nodes += 1
            if depth > MAX_DEPTH:
                raise YamlRefused(
                    f"the document nests deeper than {MAX_DEPTH} levels{_where(event.start_mark)}"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
        elif isinstance(event, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise YamlRefused(
                    f"the document uses more than {MAX_ALIASES} aliases{_where(event.start_mark)}"
                )
        if nodes > MAX_NODES:
            raise YamlRefused(f"the document has more than {MAX_NODES} values{_where(event.start_mark)}")


def _expanded_size(root: yaml.Node) -> int:
    """Nodes in the document with every alias written out (aliases compose to the same
    node object, so a node reached twice counts twice). Memoised per node, iterative."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            sizes[id(node)] = min(MAX_NODES + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in children if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class _StrictLoader(_LOADER_BASE):  # type: ignore[misc,valid-type]
    """Safe loading (libyaml's when built with it) that refuses duplicate and non-string keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue  # ``<<: *defaults``: merged keys may be overridden, by design
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise YamlRefused(
                    f"the key {key!r} is not a string{_where(key_node.start_mark)}; every key must be a"
                    " field name (quote it if it is meant as text)"
                )
            if key in seen:
                raise YamlRefused(
                    f"the key {key!r} is given twice in one mapping{_where(key_node.start_mark)}; keep one"
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


_StrictLoader.add_constructor(
    "tag:yaml.org,2002:map",
    lambda loader, node: loader.construct_mapping(node, deep=True),
)


def load_yaml(text: str) -> Any:
    """The one YAML document in ``text`` as plain Python values (dicts with string keys,
    lists, scalars). Raises ``YamlRefused`` for anything unsafe, malformed or oversized."""
    try:
        _check_events(text)
        loader = _StrictLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None
            if _expanded_size(root) > MAX_NODES:
                raise YamlRefused(
                    f"the document's aliases expand to more than {MAX_NODES} values (an alias bomb?);"
                    " write the values out or use fewer aliases"
                )
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except YamlRefused:
        raise
    except yaml.YAMLError as exc:
        raise YamlRefused(f"not valid YAML: {exc}") from None
    except RecursionError:
        raise YamlRefused(f"the document nests deeper than {MAX_DEPTH} levels") from None
