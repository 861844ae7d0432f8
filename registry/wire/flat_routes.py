"""Resolve protocol paths with one regular expression per route.

Django's resolver walks the URLconf as a tree on every request: the root pattern, then the include of
``eureka/``, ``eureka/v2/``..., then each route in turn, building a ``ResolverMatch`` and a list of
tried patterns at every level. For heartbeats that walk costs more than the registry work itself.
``FlatRoutes`` joins each route's patterns, prefixes included, into one compiled expression when the
URLconf is loaded and builds the same ``ResolverMatch`` Django would (the differential test compares
them on every route shape).

Only plain regular expressions are flattened: ``re_path`` patterns that start with ``^``, with named
groups only. Routes are taken in Django's order up to the first one that is not (a ``path()``
converter, an unnamed group, a catch-all); that one and every later route are left to Django's
resolver, and so is every path no flat route matches, so a 404 is still Django's own (with its
handler404). Taking only a leading run keeps the answer exact: a flat route matches only where no
earlier route would have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver
from django.urls.resolvers import RegexPattern, ResolverMatch


@dataclass(frozen=True)
class _Route:
    regex: re.Pattern
    full: bool  # the endpoint ends in "$": the whole path must match, as Django's fullmatch
    # Per level, outermost first: the names that level captures and its default kwargs. Django
    # merges them in this order, later levels winning.
    levels: tuple[tuple[tuple[str, ...], dict], ...]
    # The names of the route's own level: what Django reports as captured_kwargs.
    own_names: tuple[str, ...]
    # Whether the captured names alone make the kwargs (no level has default kwargs).
    plain: bool
    extra_kwargs: dict
    # The names ResolverMatch lists (empty ones left out), copied into a fresh list for each match.
    app_names: tuple[str, ...]
    namespaces: tuple[str, ...]
    # What is the same in every match of the route (the view, url_name, route, view_name, app_name,
    # _func_path...), taken once from a ResolverMatch Django built for it, copied into each match.
    derived: dict

    @property
    def url_name(self) -> str | None:
        return self.derived["url_name"]


class NotFlat(Exception):
    """A pattern the flat routes do not reproduce exactly: it and every later route stay Django's."""


def _body(pattern: RegexPattern) -> str:
    source = pattern._regex
    if not isinstance(source, str) or not source.startswith("^"):
        # Django searches an unanchored pattern anywhere in the path.
        raise NotFlat(f"unanchored pattern {source!r}")
    compiled = pattern.regex
    if compiled.groups != len(compiled.groupindex) or compiled.flags & ~re.UNICODE:
        raise NotFlat(f"unnamed groups or flags in {source!r}")
    return source[1:]


def _join_route(outer: str, inner: str) -> str:
    # As URLResolver._join_route: the inner route loses its leading "^".
    return inner if not outer else outer + inner.removeprefix("^")


def _flatten(
    resolver: URLResolver,
    prefix: str,
    levels: tuple,
    extra: dict,
    app_names: tuple,
    namespaces: tuple,
    route: str,
    out: list[_Route],
) -> None:
    for entry in resolver.url_patterns:
        if not isinstance(entry.pattern, RegexPattern):
            raise NotFlat(f"not a regular expression: {entry.pattern!r}")
        body = _body(entry.pattern)
        names = tuple(entry.pattern.regex.groupindex)
        if isinstance(entry, URLResolver):
            _flatten(
                entry,
                # Atomic: once a prefix matched, Django never gives characters back to the routes.
                prefix + f"(?>{body})",
                levels + ((names, dict(entry.default_kwargs)),),
                {**extra, **entry.default_kwargs},
                app_names + (entry.app_name,),
                namespaces + (entry.namespace,),
                _join_route(route, str(entry.pattern)),
                out,
            )
            continue
        assert isinstance(entry, URLPattern)
        full = body.endswith("$") and not body.endswith(r"\$")
        source = prefix + (body[:-1] if full else body)
        all_names = [name for level in levels for name in level[0]] + list(names)
        if len(all_names) != len(set(all_names)):
            raise NotFlat(f"a group name is captured twice on the way to {body!r}")
        all_levels = levels + ((names, dict(entry.default_args)),)
        extra_kwargs = {**extra, **entry.default_args}
        template = ResolverMatch(
            entry.callback,
            (),
            {},
            entry.pattern.name,
            list(app_names),
            list(namespaces),
            _join_route(route, str(entry.pattern)),
        )
        derived = {
            name: value
            for name, value in vars(template).items()
            if name not in _PER_MATCH and not isinstance(value, list)
        }
        out.append(
            _Route(
                regex=re.compile(source),
                full=full,
                levels=all_levels,
                own_names=names,
                plain=not any(defaults for _, defaults in all_levels),
                extra_kwargs=extra_kwargs,
                app_names=tuple(template.app_names),
                namespaces=tuple(template.namespaces),
                derived=derived,
            )
        )


class FlatRoutes:
    """The routes of one URLconf, flattened; ``resolve`` answers None where Django must decide."""

    def __init__(self, urlconf: str):
        root = get_resolver(urlconf)
        routes: list[_Route] = []
        # Where flattening stopped ("" when every route is flat): routes from there on are Django's.
        self.not_flat = ""
        try:
            body = _body(root.pattern)
            _flatten(
                root,
                body,
                ((tuple(root.pattern.regex.groupindex), dict(root.default_kwargs)),),
                dict(root.default_kwargs),
                (root.app_name,),
                (root.namespace,),
                "",
                routes,
            )
        except NotFlat as reason:
            self.not_flat = str(reason)
        self.routes: tuple[_Route, ...] = tuple(routes)

    def resolve(self, path: str) -> ResolverMatch | None:
        for route in self.routes:
            match = route.regex.fullmatch(path) if route.full else route.regex.match(path)
            if match is None:
                continue
            found = match.groupdict()
            if route.plain:
                # Group names are unique across levels (checked when flattening), so with no defaults
                # the kwargs are simply what matched.
                kwargs = {name: value for name, value in found.items() if value is not None}
                captured = {name: found[name] for name in route.own_names if found[name] is not None}
            else:
                kwargs = {}
                captured = {}
                for names, defaults in route.levels:
                    captured = {name: found[name] for name in names if found[name] is not None}
                    kwargs.update(captured)
                    kwargs.update(defaults)
            return _match(route, kwargs, captured)
        return None


# ResolverMatch attributes that differ between two matches of one route (or are lists, fresh in each).
_PER_MATCH = frozenset({"args", "kwargs", "captured_kwargs", "extra_kwargs", "tried"})


def _match(route: _Route, kwargs: dict, captured: dict) -> ResolverMatch:
    """The ResolverMatch Django builds for this route and these kwargs. Its __init__ derives names and
    paths from the route's fixed parts (a tenth of a heartbeat's application time); those are copied
    from the route's template instead, and the rest is set as __init__ sets it."""
    resolved = ResolverMatch.__new__(ResolverMatch)
    attributes = resolved.__dict__
    attributes.update(route.derived)
    attributes["args"] = ()
    attributes["kwargs"] = kwargs
    attributes["tried"] = None
    attributes["captured_kwargs"] = captured
    attributes["extra_kwargs"] = dict(route.extra_kwargs)
    attributes["app_names"] = list(route.app_names)
    attributes["namespaces"] = list(route.namespaces)
    return resolved
