"""The run store: a results root shared by several specs, and the identities that let them share runs.

Owns: computing each planned run's identity (:mod:`.identify`, with token files named by content:
:mod:`.fingerprint`), finding a run of another spec with the same identity (:mod:`.index`), and
explaining why two runs are not the same (:mod:`.explain`). The hashing rules themselves are in
:mod:`olmoablate.contract.identity`; the lease that stops two `submit`s from training one
identity twice is launch's (:mod:`olmoablate.launch.lease`). Login-node light: no torch, no pandas.

::

    <store>/                       the results root (default results/, --store, $OLMOABLATE_STORE)
      <spec>/plan.json             its "identity" section: versions, data fingerprints, hashes, reuse
      <spec>/runs/<id>/reused.json a run trained by another spec: where its files are (launch)
      <spec>/runs/<id>/identity.json  the identity of the run trained here (launch)
      .store/leases/<hash>.json    which spec's run trains that identity (launch, under .store/lock)
"""

import os

#: Environment variable naming the store (the results root) when --store is not given.
STORE_ENV = "OLMOABLATE_STORE"
DEFAULT_STORE = "results"


def default_store() -> str:
    """The results root: ``$OLMOABLATE_STORE`` or ``results``."""
    return os.environ.get(STORE_ENV) or DEFAULT_STORE
