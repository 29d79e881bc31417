"""``streamcrew dead`` and ``streamcrew webhooks dead``: inspect, replay and purge dead letters."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from consumers.cli_base import Exit, Prefix, RedisUrl, build, dead_app, err, out, run, webhooks_dead_app
from streams import dead
from streams.config import StreamSettings

if TYPE_CHECKING:
    from streams.dead import Replay

# The reasons a dead letter is listed with (streams.dead.REASONS): a job's, step_failed (a workflow a step failed), and
# malformed (a letter streamcrew did not write, which only purge removes).
REASONS = dead.REASONS
Count = Annotated[int, typer.Option(min=1, help="how many, oldest first")]


def _check_reason(reason: str | None) -> None:
    """A reason no dead letter carries would match none: say so rather than do nothing."""
    if reason is not None and reason not in REASONS:
        err.print(f"[red]--reason {escape(repr(reason))} is not a dead-letter reason; use one of {', '.join(REASONS)}[/red]")
        raise typer.Exit(Exit.USAGE)


def _confirm(question: str) -> None:
    """Ask; "no", or no answer (stdin closed), ends the command with nothing done: exit 1, not a usage error."""
    try:
        agreed = typer.confirm(question)
    except typer.Abort:  # end of input, or Ctrl-C at the prompt
        agreed = False
    if not agreed:
        err.print("nothing deleted")
        raise typer.Exit(Exit.DECLINED)


@dead_app.command("list")
def dead_list(
    count: Count = 100,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON lines")] = False,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """List dead letters."""
    from consumers.ops import open_ops
    from consumers.views import dead_table

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)

    async def go() -> list[Any]:
        async with open_ops(settings) as ops:
            return await ops.dead_list(count)

    letters = run(go())
    if as_json:
        for letter in letters:
            print(json.dumps(letter.model_dump(mode="json")))  # ASCII: a submitter's text cannot drive the terminal
    else:
        out.print(dead_table(letters))


@dead_app.command("replay")
def dead_replay(
    entry_ids: Annotated[list[str] | None, typer.Argument(help="dead letters' entry_id as dead list shows them (<entry ID>:<partition> with partitions)")] = None,
    replay_all: Annotated[bool, typer.Option("--all", help="replay every dead letter (with --reason: those with that reason)")] = False,
    reason: Annotated[str | None, typer.Option(help=f"with --all: only dead letters of this reason ({', '.join(REASONS)})")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Send dead letters back to their lanes with a fresh attempt budget; exit 1 if some are skipped, 4 if Redis goes away part-way.

    What went back is printed all the same (named entries not reached: "not_replayed")."""
    from consumers.ops import open_ops

    if not entry_ids and not replay_all:
        err.print("[red]name dead-letter entry IDs or pass --all[/red]")
        raise typer.Exit(Exit.USAGE)
    if reason is not None and not replay_all:
        err.print("[red]--reason goes with --all[/red]")
        raise typer.Exit(Exit.USAGE)
    _check_reason(reason)
    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)

    async def go() -> Replay:
        async with open_ops(settings) as ops:
            return await ops.dead_replay(entry_ids or [], replay_all, reason=reason)

    _report_replay(run(go()), named=not replay_all, what="job ids")


def _report_replay(done: Replay, *, named: bool, what: str) -> None:
    """Print what a replay did as its POST route answers (the reasons too), then exit: 0, 1 if some were skipped,
    4 if Redis went away part-way (then also the named entries not reached, ``not_replayed``)."""
    for why in done.skipped:
        err.print(f"[yellow]skipped: {escape(why)}[/yellow]")  # a reason may quote the name given
    report: dict[str, Any] = {"replayed": done.replayed, "skipped": done.skipped}
    if done.outage is not None and named:
        report["not_replayed"] = done.not_replayed
    print(json.dumps(report))
    if done.outage is not None:
        _replay_interrupted(done, what)
        raise typer.Exit(Exit.UNAVAILABLE)
    raise typer.Exit(Exit.OK if not done.skipped else Exit.JOB_FAILED)


def _replay_interrupted(done: Replay, named: str) -> None:
    """One line: the outage, what went back before it (its ``named``), what did not; the same command again finishes the job."""
    went = f"replayed {len(done.replayed)} ({named}: {', '.join(done.replayed)})" if done.replayed else "replayed none"
    rest = (f"not replayed: {', '.join(done.not_replayed)} (the first may have gone through, its answer lost)" if done.not_replayed
            else "the rest are still dead letters (one may have gone through, its answer lost)")
    cause = f"{type(done.outage).__name__}: {done.outage}"
    err.print(f"[red]Redis unavailable part-way ({escape(cause)}): {escape(went)}; {escape(rest)}. Run the same command once "
              "Redis is back: a dead letter already replayed is skipped as gone[/red]")


@dead_app.command("purge")
def dead_purge(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    reason: Annotated[str | None, typer.Option(help=f"only dead letters of this reason ({', '.join(REASONS)})")] = None,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Delete every dead letter (or those of one reason); asks first unless --yes, and a no deletes nothing (exit 1)."""
    from consumers.ops import open_ops

    _check_reason(reason)
    what = f"every dead letter of reason {reason!r}" if reason else "every dead letter"
    if not yes:
        _confirm(f"Delete {what}?")
    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)

    async def go() -> int:
        async with open_ops(settings) as ops:
            return await ops.dead_purge(reason=reason)

    print(json.dumps({"purged": run(go())}))


@webhooks_dead_app.command("list")
def webhooks_dead_list(
    count: Count = 100,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON lines (the URL and event as stored)")] = False,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """List webhook deliveries that exhausted their retries, every partition's merged."""
    from consumers.notifier import list_webhook_dead
    from consumers.views import webhook_dead_table

    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    letters = run(_with_redis(settings, lambda r, k: list_webhook_dead(r, k, count, partitions=settings.partitions)))
    if as_json:
        for letter in letters:
            print(json.dumps(letter.model_dump(mode="json")))  # ASCII: a submitter's text cannot drive the terminal
    else:
        out.print(webhook_dead_table(letters))


@webhooks_dead_app.command("replay")
def webhooks_dead_replay(
    entry_ids: Annotated[list[str] | None, typer.Argument(help="webhook dead letters' entry_id as list shows them (<entry ID>:<partition> with partitions)")] = None,
    replay_all: Annotated[bool, typer.Option("--all", help="replay every webhook dead letter (of every partition)")] = False,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Deliver webhook dead letters again (the notifier picks them up); exit 1 if some are skipped, 4 if Redis goes away part-way.

    What went back is printed all the same (named entries not reached: "not_replayed")."""
    from consumers.notifier.dead import replay_webhook_each

    if not entry_ids and not replay_all:
        err.print("[red]name webhook dead-letter entry IDs or pass --all[/red]")
        raise typer.Exit(Exit.USAGE)
    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    named = [] if replay_all else list(entry_ids or [])
    done: Replay = run(_with_redis(
        settings, lambda r, k: dead.gather(replay_webhook_each(r, k, None if replay_all else named, partitions=settings.partitions), named)))
    _report_replay(done, named=not replay_all, what="entries")


@webhooks_dead_app.command("purge")
def webhooks_dead_purge(
    yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False,
    redis_url: RedisUrl = None,
    prefix: Prefix = None,
) -> None:
    """Delete every webhook dead letter (of every partition); asks first unless --yes, and a no deletes nothing (exit 1)."""
    from consumers.notifier import purge_webhook_dead

    if not yes:
        _confirm("Delete every webhook dead letter?")
    settings = build(StreamSettings, redis_url=redis_url, prefix=prefix)
    print(json.dumps({"purged": run(_with_redis(settings, lambda r, k: purge_webhook_dead(r, k, partitions=settings.partitions)))}))


async def _with_redis(settings: StreamSettings, call: Any) -> Any:
    """One short-lived client for a command that makes one call."""
    from streams.connection import connect_detected
    from streams.keys import Keys
    from streams.layout import check_layout

    redis = await connect_detected(settings.effective_redis_url, one_shot=True)
    try:
        await check_layout(redis, Keys(settings.prefix), settings.partitions)
        return await call(redis, Keys(settings.prefix))
    finally:
        await redis.aclose()
