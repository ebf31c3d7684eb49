#!/bin/sh
TICK_SECONDS=10 exec tick "worker: nothing to do"
