// SPDX-License-Identifier: MIT
#include <string>
#include <utility>

#include "proto/cluster_slot.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::proto;

TEST_CASE("crc16_xmodem matches the XMODEM check value", "[cluster_slot]") {
    CHECK(crc16_xmodem("123456789") == 0x31C3);
    CHECK(crc16_xmodem("") == 0);
}

TEST_CASE("cluster_key_slot matches CLUSTER KEYSLOT of redis-server 7.0", "[cluster_slot]") {
    // Each slot was asked of a real `redis-server --cluster-enabled yes`.
    const std::pair<std::string, unsigned> known[] = {
        {"", 0},
        {"foo", 12182},
        {"bar", 5061},
        {"123456789", 12739},
        {"{user1000}.following", 3443},
        {"user1000", 3443},
        {"foo{}{bar}", 8363},
        {"foo{{bar}}zap", 4015},
        {"foo{bar}{zap}", 5061},
        {"{}", 15257},
        {"}{", 12793},
        {"{a", 10276},
        {"a}", 5921},
        {"{ab}c", 13567},
        {"pt2:fx-graph-v1::fabcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrstu:c1", 2810},
        {"pt2:autograd-experimental::aqwertyuiopasdfghjklzxcvbnm2345671234567abcdefghij:c1", 5840},
        {"pt2:bundled-autotune-v1::zzz:c1", 6815},
        {"pt2:dynamo-pgo::mykey:c1", 6637},
        {"pt2sig:{pt2:fx-graph-v1::fx:c1}", 13225},
        {"pt2:fx-graph-v1::fx:c1", 13225},
    };
    for (const auto& [key, slot] : known) {
        INFO(key);
        CHECK(cluster_key_slot(key) == slot);
    }
}

TEST_CASE("cluster_hash_part follows the hash tag rules", "[cluster_slot]") {
    CHECK(cluster_hash_part("plain") == "plain");
    CHECK(cluster_hash_part("a{tag}b") == "tag");
    CHECK(cluster_hash_part("a{}b{tag}") == "a{}b{tag}"); // empty first tag: whole key
    CHECK(cluster_hash_part("{{x}}") == "{x");            // first '{' to the first '}' after it
    CHECK(cluster_hash_part("no{close") == "no{close");
    CHECK(cluster_hash_part(std::string_view("\0{\xff}", 4)) == "\xff");
    CHECK(cluster_key_slot(std::string(100000, 'x')) < k_cluster_slots);
}
