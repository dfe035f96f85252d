"""The embedded broker: a worker polling the queue folder never takes a message before it is written whole."""

from __future__ import annotations

import multiprocessing
from queue import Empty

from kombu import Connection
from kombu.transport import filesystem

from config.embedded_broker import Transport

MESSAGES = 40
# kombu's channel opens the file before it encodes the message: a payload that takes a few ms to encode
# leaves an empty file in the queue folder that long, for a poller in another process to take.
PAYLOAD = {"items": list(range(100_000))}


def _connection(folder: str, transport: type = Transport) -> Connection:
    options = {"data_folder_in": folder, "data_folder_out": folder, "control_folder": folder}
    return Connection("filesystem://localhost//", transport=transport, transport_options=options)


def _write(folder: str, transport: type) -> None:
    with _connection(folder, transport) as connection:
        for _ in range(MESSAGES):
            connection.default_channel._put("jobs", PAYLOAD)


def messages_taken_while_written(folder: str, transport: type = Transport) -> list[object]:
    """Poll the queue as a worker does while another process puts MESSAGES; what the poller took, or raised."""
    writer = multiprocessing.get_context("fork").Process(target=_write, args=(folder, transport))
    taken: list[object] = []
    with _connection(folder, transport) as connection:
        channel = connection.default_channel
        writer.start()
        while writer.is_alive() or len(taken) < MESSAGES:
            try:
                taken.append(channel._get("jobs"))
            except Empty:
                if not writer.is_alive() and writer.exitcode != 0:
                    break
            except Exception as exc:
                taken.append(exc)
                break
        writer.join(timeout=60)
    return taken


def test_every_message_a_poller_takes_is_whole_while_another_process_puts(tmp_path):
    """kombu's own channel creates the file, then writes it: a poller in between reads b'' (JSONDecodeError)."""
    taken = messages_taken_while_written(str(tmp_path))

    assert taken == [PAYLOAD] * MESSAGES
    assert not list(tmp_path.glob(".*.partial"))


def test_kombus_own_channel_loses_that_race(tmp_path):
    """Why the wrapper exists; once a kombu release passes this, the wrapper can go."""
    taken = messages_taken_while_written(str(tmp_path), filesystem.Transport)

    assert type(taken[-1]).__name__ == "JSONDecodeError"
