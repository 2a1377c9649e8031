"""One HTTP call to a web search engine: a pooled ``httpx`` client, one attempt bounded by the timeout.

Web search runs inside a user's request beside the knowledge-base search, so it is not retried: a slow or failing
engine costs at most ``timeout_s`` (less when the request's deadline is closer: :mod:`ragstep.deadline`) and the
search goes on without it (a ``degrade`` row). Every failure is a :class:`~ragstep.errors.ProviderError` whose message
names the engine and the kind of failure, never the engine's URL or body (logged instead, credentials masked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragstep import __version__, deadline
from ragstep.adapters._http import _LazyClient, log_detail, provider_failure
from ragstep.errors import ProviderError

if TYPE_CHECKING:
    import httpx


class WebClient(_LazyClient):
    def __init__(self, source: str, *, timeout_s: float, headers: dict[str, str] | None = None) -> None:
        self.source = source
        self.timeout_s = timeout_s
        self._headers = headers or {}
        super().__init__()

    def _create(self) -> httpx.Client:
        import httpx

        headers = {"User-Agent": f"ragstep/{__version__}", **self._headers}
        return httpx.Client(timeout=httpx.Timeout(self.timeout_s), headers=headers, follow_redirects=True)

    def request(
        self, method: str, url: str, *, params: dict[str, Any] | None = None, json: Any = None, data: Any = None
    ) -> httpx.Response:
        import httpx

        client: httpx.Client = self.get()
        # Never longer than the request's deadline allows (ragstep.deadline; no deadline = the configured timeout).
        timeout_s = deadline.attempt_timeout(self.timeout_s)
        if timeout_s is None:
            raise ProviderError(f"{self.source} {deadline.out_of_time(0)}")
        try:
            response = client.request(method, url, params=params, json=json, data=data, timeout=timeout_s)
        except httpx.TimeoutException:
            raise ProviderError(f"{self.source} timed out after {timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            log_detail(self.source, url, "request failed", f"{type(exc).__name__}: {exc}")
            raise ProviderError(f"{self.source} is unreachable ({type(exc).__name__})") from None
        if not response.is_success:
            raise provider_failure(self.source, url, response.status_code, response.text)
        return response

    def get_json(self, url: str, params: dict[str, Any]) -> Any:
        return self.decode(self.request("GET", url, params=params))

    def decode(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            log_detail(self.source, str(response.url), "answered a body that is not JSON", response.text)
            raise ProviderError(f"{self.source} answered a body that is not JSON") from None


def text_of(value: Any) -> str:
    """A field of a provider's answer as one clean line of text ('' for anything that is not a string)."""
    return " ".join(value.split()) if isinstance(value, str) else ""


def is_web_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))
