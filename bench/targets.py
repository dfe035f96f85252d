"""How every bench prints a target of the performance budget: its figure and its goal on one line."""

from __future__ import annotations


def target_line(label: str, value: float, goal: float, direction: str, unit: str = "") -> str:
    """`target: <label> = <value> (goal <direction> <goal>)`, with `  not met` when it is not."""
    met = value >= goal if direction == ">=" else value <= goal
    return f"target: {label} = {value:.2f}{unit} (goal {direction} {goal:.2f}{unit}){'' if met else '  not met'}"
