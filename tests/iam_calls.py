"""The AWS actions each `sqsjkr` subcommand can make, read from sqsjkr's source.

A call graph of the package by rapid type analysis; each botocore method it reaches is an IAM action.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from botocore.session import Session

PACKAGE = Path(__file__).resolve().parent.parent / "sqsjkr"
SERVICES = ("sqs", "dynamodb", "scheduler", "sts", "events")
#: The parts of a TransactWriteItems, each authorised as the action it stands for.
TRANSACT_PARTS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
}
#: Calls that IAM authorises by another action (SQS's batch calls by their single ones).
AUTHORISED_AS = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
    "sqs:SendMessageBatch": "sqs:SendMessage",
}
#: Modules that make no AWS call by design (imports flow commands -> daemon -> backends ->
#: contract): a config key named like a botocore method (`delete_message`) is not a call.
NO_CALLS = "sqsjkr.contract"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@functools.cache
def operations() -> dict[str, frozenset[str]]:
    """Each botocore client method name of the services sqsjkr uses, and its actions."""
    session = Session()
    session.set_config_variable("region", "us-east-1")
    found: dict[str, set[str]] = defaultdict(set)
    for service in SERVICES:
        client = session.create_client(
            service, aws_access_key_id="unused", aws_secret_access_key="unused"
        )
        for method, operation in client.meta.method_to_api_mapping.items():
            found[method].add(f"{service}:{operation}")
    return {method: frozenset(actions) for method, actions in found.items()}


@dataclass
class Code:
    """A function, a method, a class body or a module's top level, and what it refers to."""

    module: str
    cls: str | None
    node: ast.AST
    calls: set[str] = field(default_factory=set)  # AWS actions
    parts: set[str] = field(default_factory=set)  # TransactWriteItems parts it builds
    edges: set[str] = field(default_factory=set)  # keys of Code; "?key": a method of key's class


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _imports(tree: ast.Module) -> dict[str, str]:
    """Each name a module imports from sqsjkr: "module:name", or "module:" for a module."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqsjkr"):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sqsjkr"):
                    names[alias.asname or alias.name] = f"{alias.name}:"
    return names


def _index() -> tuple[dict[str, Code], dict[str, dict[str, str]]]:
    codes: dict[str, Code] = {}
    imports: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports[module] = _imports(tree)
        top = [n for n in tree.body if not isinstance(n, (*_FUNCTIONS, ast.ClassDef))]
        codes[f"{module}:<module>"] = Code(module, None, ast.Module(body=top, type_ignores=[]))
        for node in tree.body:
            if isinstance(node, _FUNCTIONS):
                codes[f"{module}:{node.name}"] = Code(module, None, node)
            elif isinstance(node, ast.ClassDef):
                codes[f"{module}:{node.name}"] = Code(module, node.name, node)
                for item in node.body:
                    if isinstance(item, _FUNCTIONS):
                        codes[f"{module}:{node.name}.{item.name}"] = Code(module, node.name, item)
    return codes, imports


def _body(code: Code) -> Iterator[ast.AST]:
    """Every node of code; a class's methods are codes of their own."""
    if isinstance(code.node, ast.ClassDef):
        roots = [n for n in code.node.body if not isinstance(n, _FUNCTIONS)]
        roots += code.node.decorator_list + code.node.bases
    else:
        roots = [code.node]
    for root in roots:
        yield from ast.walk(root)


def _called_or_passed(tree: Iterator[ast.AST]) -> set[int]:
    """The ids of the nodes that are called, or passed to a call (a bound method as callback)."""
    ids: set[int] = set()
    for node in tree:
        if isinstance(node, ast.Call):
            ids.add(id(node.func))
            ids.update(id(arg) for arg in node.args)
            ids.update(id(keyword.value) for keyword in node.keywords)
    return ids


def _local_names(nodes: list[ast.AST]) -> set[str]:
    """The names a function binds itself (arguments, assignments, loop variables): a local
    `pause` is not the module's function of that name."""
    names = {n.arg for n in nodes if isinstance(n, ast.arg)}
    return names | {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _link(
    key: str,
    code: Code,
    codes: dict[str, Code],
    names: dict[str, str],
    methods: dict[str, set[str]],
) -> None:
    """Fill code's calls, parts and edges."""
    ops = operations()
    aws = not code.module.startswith(NO_CALLS)
    if isinstance(code.node, ast.ClassDef):
        code.edges |= {f"{key}.{name}" for name in ("__init__", "__post_init__", "__enter__")}
        code.edges |= {f"{key}.{name}" for name in ("__exit__", "__call__", "run")}
    nodes = list(_body(code))
    used = _called_or_passed(iter(nodes))
    local = _local_names(nodes)
    for node in nodes:
        if isinstance(node, ast.Dict):
            code.parts |= {k.value for k in node.keys if isinstance(k, ast.Constant)}
        elif isinstance(node, ast.Constant) and aws and node.value in ops and id(node) in used:
            code.calls |= ops[str(node.value)]  # get_paginator("scan")
        elif isinstance(node, ast.Name) and node.id not in local:
            target = names.get(node.id, f"{code.module}:{node.id}")
            code.edges.add(target)
        elif isinstance(node, ast.Attribute):
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls") and code.cls:
                own = f"{code.module}:{code.cls}.{node.attr}"
                if own in codes:
                    code.edges.add(own)
                    continue
            if isinstance(value, ast.Name) and names.get(value.id, "").endswith(":"):
                code.edges.add(names[value.id] + node.attr)  # module.function
                continue
            if aws and node.attr in ops and id(node) in used:
                code.calls |= ops[node.attr]
            code.edges |= {f"?{method}" for method in methods.get(node.attr, ())}
    # A click subcommand (@group.command()) is reached from its group.
    if isinstance(code.node, _FUNCTIONS):
        for decorator in code.node.decorator_list:
            call = decorator.func if isinstance(decorator, ast.Call) else decorator
            if isinstance(call, ast.Attribute) and isinstance(call.value, ast.Name):
                group = codes.get(f"{code.module}:{call.value.id}")
                if group is not None and call.attr == "command":
                    group.edges.add(key)


@functools.cache
def graph() -> dict[str, Code]:
    """Every code of the package, linked."""
    codes, imports = _index()
    methods: dict[str, set[str]] = defaultdict(set)  # a method's name -> each class's
    for key, code in codes.items():
        if code.cls and isinstance(code.node, _FUNCTIONS):
            methods[key.rpartition(".")[2]].add(key)
    for key, code in codes.items():
        _link(key, code, codes, imports[code.module], methods)
        code.edges = {_through_imports(edge, codes, imports) for edge in code.edges}
    return codes


def _through_imports(key: str, codes: dict[str, Code], imports: dict[str, dict[str, str]]) -> str:
    """key, or the code it names when its module only imports it (a re-export, such as
    sqsjkr.fleet.daemon's `from sqsjkr.daemon.service import serve_until_stopped as ...`)."""
    seen: set[str] = set()
    while key not in codes and key not in seen and not key.startswith("?"):
        seen.add(key)
        module, _, name = key.partition(":")
        head, dot, rest = name.partition(".")
        source = imports.get(module, {}).get(head, "")
        if not source or source.endswith(":"):
            break
        key = source + dot + rest
    return key


def reachable(entry: str) -> set[str]:
    """The codes entry can run. A method called on an object of unknown class counts only once
    code already reached has named its class (rapid type analysis): a name is not a call."""
    codes = graph()
    seen: set[str] = set()
    waiting: dict[str, set[str]] = defaultdict(set)  # class -> its methods called by name
    todo = [entry]
    while todo:
        key = todo.pop()
        if key.startswith("?"):
            method = key[1:]
            owner = method.rpartition(".")[0]
            (todo.append(method) if owner in seen else waiting[owner].add(method))
            continue
        if key in seen or key not in codes:
            continue
        seen.add(key)
        todo += waiting.pop(key, set())
        todo += codes[key].edges
        todo.append(f"{codes[key].module}:<module>")
    return seen


def actions(entry: str) -> set[str]:
    """The IAM actions the code reachable from entry ("module:function") needs."""
    codes = graph()
    calls: set[str] = set()
    parts: set[str] = set()
    for key in reachable(entry):
        calls |= codes[key].calls
        parts |= codes[key].parts
    if "dynamodb:TransactWriteItems" in calls:
        calls.discard("dynamodb:TransactWriteItems")
        calls |= {TRANSACT_PARTS[part] for part in parts & TRANSACT_PARTS.keys()}
    return {AUTHORISED_AS.get(call, call) for call in calls}


def daemon_actions() -> set[str]:
    """The IAM actions of the daemon, `sqsjkr run`: what the module's host policy grants."""
    return actions("sqsjkr.commands.run:run")
