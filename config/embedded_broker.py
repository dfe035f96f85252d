"""The embedded default's Celery broker: kombu's filesystem transport, each message written whole before it appears.

kombu's filesystem channel creates a message's file in the queue folder and only then
writes it. A worker polling that folder can take the file in between, read nothing, and
stop with "Unrecoverable error: JSONDecodeError" (seen when beat queued a sweep while
`make run` was stopping). Here a message is written under a name the channel never reads
(it reads `*.<queue>.msg` only) and renamed into place: a rename within one folder is
atomic, so a worker sees a whole message or none.

This is the one module that overrides the channel's private `_put` (kombu 5.7, pinned in
requirements.txt and in tests/arch/test_private_dependency_names.py; tests/config/test_embedded_broker.py
shows the race and that this channel does not lose it).
"""

from __future__ import annotations

import os
import time
import uuid

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        """As kombu's `_put`, but the file takes its readable name only once it holds the whole message."""
        final = os.path.join(self.data_folder_out, f"{round(time.monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg")
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.partial")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
