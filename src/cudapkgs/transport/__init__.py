"""Talking to other machines: the one HTTP client every download, upload and cache transfer uses.

* `http`: the client (urllib3 underneath): one pool of kept-alive connections per process,
  a byte bound and a deadline for every object, retries with backoff, one-line errors naming the URL;
* `environment`: which proxy and which CA certificates a URL gets, from the environment, as curl and Nix read it;
* `deadline`: the watchdog thread that cuts a transfer's sockets when its deadline passes;
* `errors`: `TransferError` and its kinds (light: importable without loading the HTTP stack).

Nothing here is imported at start-up: `http` loads urllib3, `ssl` and `http.client`, so callers import
it inside the function that downloads (a fully cached build and an evaluation never load it).
"""
