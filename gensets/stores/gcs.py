"""``gs://`` (and ``gcs://``): Google Cloud Storage through gcsfs. gcsfs offers a create-only precondition
(``ifGenerationMatch=0``, which Store.create uses) but no generation match through its public calls: no
conditional replacement (the lease then overwrites on renewal; see gensets.store.Store.lease).

A store out of reach is gensets' to retry (:meth:`gensets.store.Store._retry`: one line per retry, then exit 3):
gcsfs's own retry of a request that did not connect (six tries, up to 32 s apart, each failure logged with a
traceback) is left out, its retries of what the service answered (429, 5xx) kept; gcsfs's log lines are not shown
(:attr:`client_loggers`)."""

from __future__ import annotations

import functools

from gensets.store import Store


class GcsStore(Store):
    package = "gcsfs"
    client_loggers = ("gcsfs",)

    def filesystem(self):
        import fsspec

        cls = _connect_once(fsspec.get_filesystem_class(self.scheme))
        return cls(), cls._strip_protocol(self.url)


@functools.cache
def _connect_once(cls: type) -> type:
    """``cls`` (gcsfs's filesystem) whose requests fail at once, as ConnectionError, when they cannot reach the
    service (aiohttp's ClientConnectionError: refused, reset, cut): gcsfs's retry decorator retries aiohttp's errors
    only, so it still retries what the service answered."""
    import aiohttp
    from gcsfs.retry import retry_request

    inner = cls._request.__wrapped__  # gcsfs's request without its retry decorator

    async def once(self, *args, **kwargs):
        try:
            return await inner(self, *args, **kwargs)
        except aiohttp.ClientConnectionError as e:
            raise ConnectionError(str(e)) from None

    return type(cls.__name__, (cls,), {"_request": retry_request(retries=cls.retries)(once),
                                       "__module__": __name__})
