"""Direct routes under a path prefix (agentrt_serving.direct.prefixed_handler): the rest of a
plain raw path goes to the prefix's route, which takes it or leaves it to the ASGI way."""

from __future__ import annotations

from agentrt_serving.direct import (
    DirectExchange,
    DirectHandler,
    DirectPrefixRoutes,
    prefixed_handler,
)


async def _handler(exchange: DirectExchange) -> None:
    return None


def test_a_prefix_route_is_given_the_rest_of_a_plain_path_and_may_leave_it() -> None:
    given: list[bytes] = []

    def route(rest: bytes) -> DirectHandler | None:
        given.append(rest)
        return None if rest == b"left" else _handler

    routes: DirectPrefixRoutes = {(b"POST", b"/p/"): route}
    assert prefixed_handler(routes, b"POST", b"/p/a/b/start") is _handler
    assert prefixed_handler(routes, b"POST", b"/p/left") is None
    assert given == [b"a/b/start", b"left"]


def test_escapes_query_strings_other_bytes_methods_and_paths_take_the_asgi_way() -> None:
    given: list[bytes] = []

    def route(rest: bytes) -> DirectHandler | None:
        given.append(rest)
        return _handler

    routes: DirectPrefixRoutes = {(b"POST", b"/p/"): route}
    for url in (
        b"/p/a%2Fb/start",
        b"/p/a/start?x=1",
        b"/p/a#f",
        b"/p/\xc3\xa9/start",
        b"/q/a",
        b"/p",
    ):
        assert prefixed_handler(routes, b"POST", url) is None, url
    assert prefixed_handler(routes, b"GET", b"/p/a/start") is None
    assert given == []
