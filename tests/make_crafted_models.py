"""Writes the crafted-model corpus in tests/fixtures/crafted/: small model files that are legal
in form but lie about their sizes, indices and nesting, each of which once aborted or silently
misread in shapfusion. `tests/crafted_models.rs` loads every one through the library, the CLI and
the Flight worker and expects the error substring listed in EXPECTED.tsv; the fuzz harness
(fuzz/) starts from them and from the regular fixtures.

The large cases (a megabyte of nested UBJSON containers, a chain of 100,000 splits) are built by
the Rust test itself, not committed.

    python3 tests/make_crafted_models.py            # rewrites tests/fixtures/crafted/

Standard library only.
"""

import json
import struct
from pathlib import Path

OUT = Path(__file__).parent / "fixtures" / "crafted"


def xgb_stump(**learner_param):
    """A one-split XGBoost JSON model on two features (the shape of XGBoost 3.x save_model)."""
    tree = {
        "tree_param": {"num_nodes": "3", "size_leaf_vector": "1", "num_feature": "2"},
        "left_children": [1, -1, -1],
        "right_children": [2, -1, -1],
        "parents": [2147483647, 0, 0],
        "split_indices": [0, 0, 0],
        "split_conditions": [0.5, -1.0, 1.0],
        "split_type": [0, 0, 0],
        "default_left": [1, 0, 0],
        "sum_hessian": [2.0, 1.0, 1.0],
        "base_weights": [0.0, -1.0, 1.0],
        "loss_changes": [1.0, 0.0, 0.0],
        "categories": [],
        "categories_nodes": [],
        "categories_segments": [],
        "categories_sizes": [],
        "id": 0,
    }
    param = {"num_feature": "2", "num_class": "0", "num_target": "1", "base_score": "5E-1"}
    param.update(learner_param)
    return {
        "version": [3, 2, 0],
        "learner": {
            "attributes": {},
            "feature_names": [],
            "feature_types": [],
            "learner_model_param": param,
            "objective": {"name": "reg:squarederror"},
            "gradient_booster": {
                "name": "gbtree",
                "model": {"gbtree_model_param": {"num_trees": "1"}, "trees": [tree], "tree_info": [0]},
            },
        },
    }


def xgb_categorical(**tree_fields):
    m = xgb_stump()
    m["learner"]["feature_types"] = ["c", "float"]
    m["learner"]["feature_names"] = ["colour", "x"]
    t = m["learner"]["gradient_booster"]["model"]["trees"][0]
    t.update(split_type=[1, 0, 0], categories=[1, 3], categories_nodes=[0], categories_segments=[0], categories_sizes=[2])
    t.update(tree_fields)
    return m


LGB_HEADER = """tree
version=v4
num_class={num_class}
num_tree_per_iteration={per_iter}
label_index=0
max_feature_idx={max_feature_idx}
objective=regression
feature_names={names}
feature_infos=[0:1] -1:1:3

tree_sizes=400

"""

LGB_TREE = """Tree=0
num_leaves=3
num_cat={num_cat}
split_feature={split_feature}
split_gain=10 5
threshold={threshold}
decision_type={decision_type}
left_child=1 -1
right_child=-2 -3
leaf_value=0.5 -0.25 0.125
leaf_weight=10 10 10
leaf_count=10 10 10
internal_value=0 0.1
internal_weight=30 20
internal_count=30 20
{categorical}is_linear=0
shrinkage=1


end of trees

feature_importances:
x=1

parameters:
end of parameters

pandas_categorical:null
"""


def lgb_model(num_class=1, per_iter=1, max_feature_idx=1, names="x colour", split_feature="0 1",
              threshold="0.5 0", decision_type="2 1", num_cat=1, categorical="cat_boundaries=0 1\ncat_threshold=10\n"):
    return LGB_HEADER.format(num_class=num_class, per_iter=per_iter, max_feature_idx=max_feature_idx, names=names) + \
        LGB_TREE.format(split_feature=split_feature, threshold=threshold, decision_type=decision_type, num_cat=num_cat,
                        categorical=categorical)


def ubj(value):
    """Encodes a JSON value as UBJSON the way XGBoost does (int32/int64, float32, strings)."""
    if value is None:
        return b"Z"
    if value is True:
        return b"T"
    if value is False:
        return b"F"
    if isinstance(value, int):
        return b"l" + struct.pack(">i", value) if -2**31 <= value < 2**31 else b"L" + struct.pack(">q", value)
    if isinstance(value, float):
        return b"d" + struct.pack(">f", value)
    if isinstance(value, str):
        raw = value.encode()
        return b"S" + ubj(len(raw)) + raw
    if isinstance(value, list):
        return b"[" + b"".join(ubj(v) for v in value) + b"]"
    if isinstance(value, dict):
        out = b"{"
        for k, v in value.items():
            raw = k.encode()
            out += ubj(len(raw))[0:] + raw + ubj(v)
        return out + b"}"
    raise TypeError(value)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    cases = []

    def write(name, content, expected):
        data = content.encode() if isinstance(content, str) else content
        (OUT / name).write_bytes(data)
        cases.append((name, expected))

    def write_json(name, model, expected):
        write(name, json.dumps(model, indent=1), expected)

    # The valid bases: they must load (the test checks), so each case below differs from a
    # working model in the one field it names.
    write_json("valid_xgb.json", xgb_stump(), "")
    write_json("valid_xgb_categorical.json", xgb_categorical(), "")
    write("valid_lgb.txt", lgb_model(), "")
    write("valid_xgb.ubj", ubj(xgb_stump()), "")

    # Counts that would size allocations.
    write_json("xgb_num_feature_huge.json", xgb_stump(num_feature="4000000000"), "num_feature = 4000000000")
    write_json("xgb_num_class_huge.json", xgb_stump(num_class="3000000000"), "num_class = 3000000000")
    write("lgb_max_feature_idx_huge.txt", lgb_model(max_feature_idx=999999999999), "max_feature_idx=999999999999")
    write("lgb_num_tree_per_iteration_huge.txt", lgb_model(per_iter=999999999999), "num_tree_per_iteration = 999999999999")
    write("lgb_num_class_huge.txt", lgb_model(num_class=99999999, per_iter=1), "num_class = 99999999")

    # Floats used as indices.
    write_json("xgb_categories_segments_1e300.json", xgb_categorical(categories_segments=[1e300]), "points outside the tree's 2 categories")
    write_json("xgb_categories_nodes_negative.json", xgb_categorical(categories_nodes=[-1]), "categories_nodes[0] = -1")
    write_json("xgb_categories_sizes_overflow.json", xgb_categorical(categories_sizes=[1.8e19]), "points outside the tree's 2 categories")
    write_json("xgb_category_code_huge.json", xgb_categorical(categories=[1, 1e300]), "category codes must be integers")
    m = xgb_stump()
    m["learner"]["gradient_booster"]["model"]["tree_info"] = [-1]
    write_json("xgb_tree_info_negative.json", m, "tree_info[0] = -1")
    m["learner"]["gradient_booster"]["model"]["tree_info"] = [0.5]
    write_json("xgb_tree_info_fraction.json", m, "tree_info[0] = 0.5")
    m = xgb_stump()
    m["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"] = [1e300, 0, 0]
    write_json("xgb_split_index_1e300.json", m, "splits on feature 1e300")
    m = xgb_stump()
    m["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"] = [-2, -1, -1]
    write_json("xgb_child_negative.json", m, "child index -2 is out of range")
    m = xgb_stump()
    m["learner"]["gradient_booster"]["model"]["trees"][0]["sum_hessian"] = [4.8e-29, 1.0, 1.0]
    write_json("xgb_child_cover_exceeds_parent.json", m, "more than its parent's")
    write("lgb_cat_threshold_1e300.txt", lgb_model(threshold="0.5 1e300"), "category set 1e300 is not one of")
    write("lgb_cat_boundaries_beyond.txt", lgb_model(categorical="cat_boundaries=0 7\ncat_threshold=10\n"), "cat_boundaries 0..7")
    write("lgb_cat_threshold_negative_word.txt", lgb_model(categorical="cat_boundaries=0 1\ncat_threshold=-5\n"), "cat_threshold= has a value")
    write("lgb_split_feature_nan.txt", lgb_model(split_feature="nan 1"), "splits on feature NaN")
    write("lgb_split_feature_negative.txt", lgb_model(split_feature="-1 1"), "splits on feature -1.0")
    write("lgb_decision_type_fraction.txt", lgb_model(decision_type="2.5 1"), "decision_type 2.5")
    write("lgb_child_fraction.txt", lgb_model().replace("left_child=1 -1", "left_child=0.5 -1"), "child 0.5 is out of range")

    # UBJSON containers whose counts outrun the file.
    head = b"{" + b"i\x07" + b"learner"
    write("ubj_zero_size_elements.ubj", head + b"[$Z#L" + struct.pack(">q", 2**62) + b"}", "invalid length")
    nested = b"[$[#I" + struct.pack(">h", 0x0FFF) + (b"$Z#I" + struct.pack(">h", 0x3000)) * 0x0FFF
    write("ubj_nested_zero_size.ubj", head + nested + b"}", "more values than")
    # 1000 float32s declared (a count the file's length allows) in 1,010 bytes.
    write("ubj_typed_floats_short.ubj", head + b"[$d#I" + struct.pack(">h", 1000) + b"\0" * 1010, "declares 1000 elements")
    write("ubj_nesting_200.ubj", head + b"[" * 200 + b"]" * 200 + b"}", "nested more than 128")

    with open(OUT / "EXPECTED.tsv", "w") as f:
        f.write("# file\texpected error substring (empty: the model loads)\n")
        for name, expected in cases:
            f.write(f"{name}\t{expected}\n")
    print(f"wrote {len(cases)} files to {OUT}")


if __name__ == "__main__":
    main()
