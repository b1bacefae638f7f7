// SPDX-License-Identifier: MIT
#include <initializer_list>
#include <string>

#include "daemon/store/remote/cluster_topology.hpp"

#include <catch2/catch.hpp>

using namespace pt2cache::daemon::store;
using Type = RedisReply::Type;

namespace {

RedisReplyPtr integer(std::int64_t value) {
    auto reply = std::make_unique<RedisReply>();
    reply->type = Type::integer;
    reply->integer = value;
    return reply;
}

RedisReplyPtr text(std::string_view value, Type type = Type::string) {
    auto reply = std::make_unique<RedisReply>();
    reply->type = type;
    reply->data = Blob::copy_of(value);
    return reply;
}

RedisReplyPtr array(std::vector<RedisReplyPtr> elements) {
    auto reply = std::make_unique<RedisReply>();
    reply->type = Type::array;
    reply->elements = std::move(elements);
    return reply;
}

template <typename... T>
RedisReplyPtr arr(T... elements) {
    std::vector<RedisReplyPtr> list;
    (list.push_back(std::move(elements)), ...);
    return array(std::move(list));
}

RedisReplyPtr node(std::string_view host, std::int64_t port) {
    return arr(text(host), integer(port), text("0123456789abcdef"));
}

RedisReplyPtr range(std::int64_t first, std::int64_t last, RedisReplyPtr master,
                    RedisReplyPtr replica = nullptr) {
    std::vector<RedisReplyPtr> list;
    list.push_back(integer(first));
    list.push_back(integer(last));
    list.push_back(std::move(master));
    if (replica) {
        list.push_back(std::move(replica));
    }
    return array(std::move(list));
}

} // namespace

TEST_CASE("parse_cluster_slots reads a real-looking reply", "[cluster]") {
    const auto reply = arr(range(5461, 16383, node("127.0.0.1", 7001), node("127.0.0.1", 7004)),
                           range(0, 5460, node("", 7000)));
    const auto ranges = parse_cluster_slots(*reply, "10.0.0.9");
    REQUIRE(ranges);
    REQUIRE(ranges->size() == 2);
    CHECK((*ranges)[0].first == 0);
    CHECK((*ranges)[0].last == 5460);
    CHECK((*ranges)[0].master == ClusterAddress{"10.0.0.9", 7000}); // empty host: the one asked
    CHECK((*ranges)[1].master == ClusterAddress{"127.0.0.1", 7001});
    REQUIRE((*ranges)[1].replicas.size() == 1);
    CHECK((*ranges)[1].replicas[0] == ClusterAddress{"127.0.0.1", 7004});
}

TEST_CASE("parse_cluster_slots refuses hostile replies", "[cluster]") {
    auto refused = [](const RedisReply& reply) {
        return !parse_cluster_slots(reply, "127.0.0.1").has_value();
    };
    CHECK(refused(*text("OK", Type::status)));
    CHECK(refused(*arr(range(0, 16384, node("a", 1))))); // slot past the end
    CHECK(refused(*arr(range(-1, 5, node("a", 1)))));    // negative slot
    CHECK(refused(*arr(range(10, 5, node("a", 1)))));    // first > last
    CHECK(refused(*arr(range(0, 5, node("a", 0)))));     // port 0
    CHECK(refused(*arr(range(0, 5, node("a", 65536))))); // port too large
    CHECK(refused(*arr(range(0, 5, node("a b", 1)))));   // space in the host
    CHECK(refused(*arr(range(0, 5, node(std::string(256, 'h'), 1)))));
    CHECK(refused(*arr(range(0, 5, arr(text("a"))))));              // node without a port
    CHECK(refused(*arr(range(0, 5, arr(integer(1), integer(2)))))); // host not a string
    CHECK(refused(*arr(arr(integer(0), integer(5)))));              // range without a master
    CHECK(refused(*arr(range(0, 10, node("a", 1)), range(10, 20, node("b", 2))))); // overlap
    CHECK(refused(*arr(range(0, 5, node("a", 1), arr(text("r"), integer(-3))))));  // bad replica
    std::vector<RedisReplyPtr> many;
    for (int i = 0; i < 16385; ++i) {
        many.push_back(range(0, 0, node("a", 1)));
    }
    CHECK(refused(*array(std::move(many))));          // more ranges than slots
    CHECK(parse_cluster_slots(*arr(), "x")->empty()); // no slots served: an empty map
}

TEST_CASE("parse_redirect reads MOVED and ASK, and nothing else", "[cluster]") {
    const auto moved = parse_redirect("MOVED 3999 127.0.0.1:6381", "h");
    REQUIRE(moved);
    CHECK(moved->kind == Redirect::Kind::moved);
    CHECK(moved->slot == 3999);
    CHECK(moved->target == ClusterAddress{"127.0.0.1", 6381});
    const auto ask = parse_redirect("ASK 0 :7000", "10.1.1.1");
    REQUIRE(ask);
    CHECK(ask->kind == Redirect::Kind::ask);
    CHECK(ask->target == ClusterAddress{"10.1.1.1", 7000});
    const auto v6 = parse_redirect("MOVED 1 [::1]:7000", "h");
    REQUIRE(v6);
    CHECK(v6->target.host == "::1");
    for (const char* bad :
         {"ERR wrong", "MOVED", "MOVED 16384 a:1", "MOVED -1 a:1", "MOVED 1 a", "MOVED 1 a:0",
          "MOVED 1 a:65536", "MOVED 1 a:1x", "MOVED x a:1", "ASK 1  a:1", "MOVED 1 a b:1"}) {
        INFO(bad);
        CHECK_FALSE(parse_redirect(bad, "h"));
    }
}
