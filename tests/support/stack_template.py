"""template.yaml as a deployment would see it: parameters at their defaults (or overrides), conditions evaluated, and
the intrinsic functions (Ref, Fn::If, Fn::Sub, Fn::GetAtt, Fn::Join ...) resolved against the physical names a test
stack gave its resources. Only what the built-stack test reads: function environments, layers, handlers,
state machine substitutions and the upload rule."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def load(path: Path) -> dict[str, Any]:
    """The template with short-form intrinsics (``!Ref X``) turned into their long form (``{"Ref": "X"}``).

    Parsed once per version of the file (a dozen test files read the template, some in every test's set-up); each
    caller gets its own copy, free to change."""
    stat = path.stat()
    return copy.deepcopy(_parse(path.resolve(), stat.st_mtime_ns, stat.st_size))


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> dict[str, Any]:
    import yaml

    # libyaml's parser when PyYAML has it: the same documents, several times faster than the pure-Python one.
    class CfnLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    def intrinsic(loader: Any, suffix: str, node: Any) -> dict[str, Any]:
        if isinstance(node, yaml.ScalarNode):
            value: Any = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        return {"Ref" if suffix == "Ref" else f"Fn::{suffix}": value}

    CfnLoader.add_multi_constructor("!", intrinsic)
    return dict(yaml.load(path.read_text(encoding="utf-8"), Loader=CfnLoader))


class NoValue:
    """``AWS::NoValue``: the property or list item is left out."""


NO_VALUE = NoValue()


@dataclass
class Deployment:
    """One deployment of ``template``: its parameters, and ``physical`` -- for each resource logical id, the value of
    ``Ref`` and of each ``Fn::GetAtt`` attribute (``{"Ref": name, "Arn": arn, ...}``) in the test stack."""

    template: dict[str, Any]
    physical: dict[str, dict[str, str]]
    overrides: Mapping[str, str] = field(default_factory=dict)
    pseudo: dict[str, str] = field(
        default_factory=lambda: {
            "AWS::Region": "eu-west-1",
            "AWS::AccountId": "123456789012",
            "AWS::Partition": "aws",
            "AWS::StackName": "ragstep-test",
            "AWS::URLSuffix": "amazonaws.com",
        }
    )

    @property
    def region(self) -> str:
        return self.pseudo["AWS::Region"]

    def parameter(self, name: str) -> str:
        if name in self.overrides:
            return str(self.overrides[name])
        return str(self.template["Parameters"][name].get("Default", ""))

    def condition(self, name: str) -> bool:
        return bool(self._condition(self.template["Conditions"][name]))

    def _condition(self, expr: Any) -> Any:
        if isinstance(expr, dict) and len(expr) == 1:
            ((fn, args),) = expr.items()
            if fn in ("Condition", "Fn::Condition"):  # the short form !Condition loads as Fn::Condition
                return self.condition(args)
            if fn == "Fn::Equals":
                left, right = (self.resolve(a) for a in args)
                return str(left) == str(right)
            if fn == "Fn::Not":
                return not self._condition(args[0])
            if fn == "Fn::Or":
                return any(self._condition(a) for a in args)
            if fn == "Fn::And":
                return all(self._condition(a) for a in args)
        raise ValueError(f"not a condition: {expr!r}")

    def exists(self, logical_id: str) -> bool:
        condition = self.template["Resources"][logical_id].get("Condition")
        return condition is None or self.condition(condition)

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function evaluated; ``NO_VALUE`` where ``AWS::NoValue`` leaves it out."""
        if isinstance(value, list):
            return [v for v in (self.resolve(item) for item in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((fn, args),) = value.items()
            if fn == "Ref":
                return self._ref(args)
            if fn == "Fn::If":
                name, then, otherwise = args
                return self.resolve(then if self.condition(name) else otherwise)
            if fn == "Fn::GetAtt":
                logical_id, attribute = args
                return self.physical[logical_id][attribute]
            if fn == "Fn::Sub":
                return self._sub(args)
            if fn == "Fn::Join":
                separator, items = args
                return separator.join(str(i) for i in self.resolve(items))
            if fn == "Fn::Select":
                index, items = args
                return self.resolve(items)[int(index)]
            if fn == "Fn::Split":
                separator, text = args
                return str(self.resolve(text)).split(separator)
        out = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.pseudo:
            return self.pseudo[name]
        if name in self.template.get("Parameters", {}):
            return self.parameter(name)
        return self.physical[name]["Ref"]

    def _sub(self, args: Any) -> str:
        text, variables = (args, {}) if isinstance(args, str) else (args[0], self.resolve(args[1]))

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(variables[name])
            if "." in name and not name.startswith("AWS::"):
                logical_id, attribute = name.split(".", 1)
                return str(self.physical[logical_id][attribute])
            return str(self._ref(name))

        return re.sub(r"\$\{([^}!]+)\}", replace, text)

    # -- what the built-stack test reads ------------------------------------------------------------------------------

    def resources(self, kind: str) -> dict[str, dict[str, Any]]:
        return {name: r for name, r in self.template["Resources"].items() if r["Type"] == kind and self.exists(name)}

    def function_environment(self, logical_id: str) -> dict[str, str]:
        """The function's environment variables: the Globals' merged with its own (its own win), resolved."""
        merged = dict(self.template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
        own = self.template["Resources"][logical_id]["Properties"].get("Environment", {}).get("Variables", {})
        merged.update(own)
        resolved = self.resolve(merged)
        return {k: str(v) for k, v in resolved.items()}

    def function_property(self, logical_id: str, name: str) -> Any:
        """A function property, its own or else the Globals' (resolved)."""
        props = self.template["Resources"][logical_id]["Properties"]
        if name in props:
            return self.resolve(props[name])
        return self.resolve(self.template.get("Globals", {}).get("Function", {}).get(name))

    def function_layers(self, logical_id: str) -> list[str]:
        """Logical ids of the function's layers that this template builds (public layers by ARN are left out)."""
        layers = self.template["Resources"][logical_id]["Properties"].get("Layers", [])
        return [item["Ref"] for item in layers if isinstance(item, dict) and "Ref" in item]

    def definition_substitutions(self, logical_id: str) -> dict[str, str]:
        props = self.template["Resources"][logical_id]["Properties"]
        return {k: str(v) for k, v in self.resolve(props.get("DefinitionSubstitutions", {})).items()}
