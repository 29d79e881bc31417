#!/bin/sh
# One-shot set-up of the compose Redis Cluster (deploy/docker-compose.cluster.yml, service
# redis-cluster-init); tests/deploy/test_cluster_deploy.py runs it against real redis-server nodes.
#
#  1. `redis-cli --cluster create` joins REDIS_CLUSTER_NODES into a cluster: the first half become
#     masters, each with one replica (--cluster-replicas 1).
#  2. The hash slot of each of the STREAMCREW_PARTITIONS partitions (the slot of `{<p>}`) is moved
#     so partition p lives on master p mod masters: the default slot split lands the tags unevenly
#     (for 12 partitions 4/5/3 on three masters). An empty slot moves as `redis-cli --cluster reshard`
#     moves one (IMPORTING, MIGRATING, then `CLUSTER SETSLOT ... NODE` on every master); a slot
#     holding keys is left where it is (docs/operations.md, "Adding shards", migrates it).
#
# Safe to re-run: an existing cluster is not created again (a second `docker compose up`), and
# partitions already in place stay. It also places the partitions on a cluster created otherwise
# (a Helm chart): REDIS_CLUSTER_NODES then needs one node.
#   REDIS_CLUSTER_NODES="redis-0:6379 redis-1:6379 ..." STREAMCREW_PARTITIONS=12 sh redis-cluster-init.sh
set -eu

nodes=${REDIS_CLUSTER_NODES:?set REDIS_CLUSTER_NODES to the nodes, as "host:port host:port ..."}
partitions=${STREAMCREW_PARTITIONS:-1}
timeout_s=${REDIS_CLUSTER_INIT_TIMEOUT_S:-60}
first=${nodes%% *}

at() {  # at HOST:PORT COMMAND...: one command to one node
    node=$1
    shift
    redis-cli -h "${node%:*}" -p "${node##*:}" "$@"
}

wait_for() {  # wait_for WHAT COMMAND...: retry COMMAND every 0.2 s for at most timeout_s
    what=$1
    shift
    tries=$((timeout_s * 5))
    until "$@" >/dev/null 2>&1; do
        tries=$((tries - 1))
        if [ "$tries" -le 0 ]; then
            echo "redis-cluster-init: timed out after ${timeout_s}s waiting for $what" >&2
            exit 1
        fi
        sleep 0.2
    done
}

wait_for_quietly() {  # wait_for_quietly SECONDS COMMAND...: as wait_for, but returns 1 on timeout instead of exiting
    ( timeout_s=$1; shift; wait_for quietly "$@" ) 2>/dev/null
}

claim_again() {  # every moved slot: its target bumps its configEpoch, then SETSLOT NODE on every master
    printf '%s' "$placed" | while read -r slot target_id target_address; do
        echo "redis-cluster-init: slot $slot is not agreed on yet; $target_address claims it again"
        at "$target_address" CLUSTER BUMPEPOCH >/dev/null
        { echo "$target_id $target_address"; printf '%s\n' "$masters" | grep -v "^$target_id "; } |
            while read -r _id address; do
                at "$address" CLUSTER SETSLOT "$slot" NODE "$target_id" >/dev/null
            done
    done
}

known_nodes() {
    at "$first" CLUSTER INFO | tr -d '\r' | sed -n 's/^cluster_known_nodes://p'
}

agree() {  # every node reports cluster_state:ok and the same slot owners (redis-cli's own check)
    redis-cli --cluster check "$first" | grep -q "All nodes agree about slots configuration" || return 1
    for node in $nodes; do
        at "$node" CLUSTER INFO | grep -q "^cluster_state:ok" || return 1
    done
}

in_place() {  # every moved slot is served by its target, as the first node sees it (agree: so does every node)
    printf '%s' "$placed" | while read -r slot target_id _address; do
        [ "$(owner_of "$slot")" = "$target_id" ] || return 1
    done
}

settled() {  # the nodes agree, and on the new owners: gossip can also undo a claim on every node alike
    agree && in_place
}

stays_settled() {  # stays_settled SECONDS: settled now and at every check for SECONDS (a late gossip can undo a claim)
    until_s=$(($(date +%s) + $1))
    while [ "$(date +%s)" -le "$until_s" ]; do
        settled || return 1
        sleep 0.2
    done
}

replicas_are() {  # replicas_are N: the first node lists N replicas
    [ "$(at "$first" CLUSTER NODES | awk '$3 ~ /slave/' | wc -l)" -eq "$1" ]
}

owner_of() {  # owner_of SLOT: the id of the master serving it
    at "$first" CLUSTER NODES | awk -v slot="$1" '$3 ~ /master/ {
        for (i = 9; i <= NF; i++) {
            if ($i ~ /^\[/) continue
            n = split($i, range, "-")
            if (slot >= range[1] + 0 && slot <= range[n] + 0) print $1
        }
    }'
}

keys_in_slot() {  # keys_in_slot SLOT MASTERS: keys the masters hold in it (only its owner has any)
    total=0
    for address in $(printf '%s\n' "$2" | cut -d' ' -f2); do
        total=$((total + $(at "$address" CLUSTER COUNTKEYSINSLOT "$1")))
    done
    echo "$total"
}

if [ "$(known_nodes)" -gt 1 ]; then
    echo "redis-cluster-init: $first already knows $(known_nodes) nodes; not creating a cluster"
else
    # shellcheck disable=SC2086  # the node list is meant to split into one argument per node
    redis-cli --cluster create $nodes --cluster-replicas 1 --cluster-yes
    wait_for "the nodes to agree on the slots" agree
    # every node beyond the masters (half of them, rounded down) became a replica: wait until gossip
    # has told the first node so, and the script ends on the whole cluster, not just its masters
    node_count=$(printf '%s\n' $nodes | wc -l)
    replica_count=$((node_count - node_count / 2))
    wait_for "$replica_count replicas to join" replicas_are "$replica_count"
fi

if [ "$partitions" -gt 1 ]; then
    # Masters as "<id> <host:port>", in a stable order (by address). Only those owning slots: a replica
    # may still call itself a master for a moment after the create.
    masters=$(at "$first" CLUSTER NODES | awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8 {split($2, a, "@"); print $1, a[1]}' | sort -k2)
    count=$(printf '%s\n' "$masters" | wc -l)
    moved=0
    kept=0
    placed=""  # "<slot> <target id> <target address>" per moved slot, for claim_again
    p=0
    while [ "$p" -lt "$partitions" ]; do
        slot=$(at "$first" CLUSTER KEYSLOT "{$p}")
        target=$(printf '%s\n' "$masters" | sed -n "$((p % count + 1))p")
        source=$(owner_of "$slot")
        if [ "$source" = "${target%% *}" ]; then
            :  # already in place
        elif [ "$(keys_in_slot "$slot" "$masters")" -gt 0 ]; then
            echo "redis-cluster-init: partition $p (slot $slot) holds keys; move it as docs/operations.md, Adding shards, says" >&2
            kept=$((kept + 1))
        else
            # as `redis-cli --cluster reshard` moves a slot: IMPORTING on the new owner and MIGRATING on the old
            # one first, so that taking the slot bumps the new owner's configEpoch above every other node's and
            # its claim wins everywhere. (A bare SETSLOT NODE can be undone by gossip between the two nodes'
            # SETSLOTs when the new owner's epoch is lower: each then believes the other owns the slot.)
            source_address=$(printf '%s\n' "$masters" | awk -v id="$source" '$1 == id {print $2}')
            if [ -z "$source_address" ]; then
                echo "redis-cluster-init: partition $p (slot $slot) is served by no live master ($source); check the cluster" >&2
                exit 1
            fi
            at "${target#* }" CLUSTER SETSLOT "$slot" IMPORTING "$source" >/dev/null
            at "$source_address" CLUSTER SETSLOT "$slot" MIGRATING "${target%% *}" >/dev/null
            # then the new owner, the old one and every other master (as tests/cluster_support.py's LocalCluster.place)
            { echo "$target"; printf '%s\n' "$masters" | grep "^$source "; printf '%s\n' "$masters" | grep -v -e "^$target\$" -e "^$source "; } |
                while read -r _id address; do
                    at "$address" CLUSTER SETSLOT "$slot" NODE "${target%% *}" >/dev/null
                done
            placed="$placed$slot $target
"
            moved=$((moved + 1))
        fi
        p=$((p + 1))
    done
    if [ "$moved" -gt 0 ]; then
        # A claim that gossip lost (about one placement in six in this project's tests) never agrees by itself,
        # or every node agrees on the old owner again: after 10 s each target takes the highest configEpoch and
        # claims its slot again on every master.
        claims=1
        until wait_for_quietly 10 settled && stays_settled 3; do
            if [ "$claims" -ge 3 ]; then
                echo "redis-cluster-init: the placed slots still disagree after $claims claims; check the cluster" >&2
                exit 1
            fi
            claim_again
            claims=$((claims + 1))
        done
    fi
    echo "redis-cluster-init: $partitions partitions round-robin over $count masters: $moved moved, $kept with keys left where they are"
fi
redis-cli --cluster check "$first"
