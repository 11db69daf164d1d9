"""EC2 Auto Scaling groups in moto, with their instances running, for the tests of the group's steps."""
from __future__ import annotations

IMAGE = "ami-12c6146b"


def make_group(autoscaling, ec2, name: str, size: int, min_size: int | None = None, max_size: int = 10) -> list[str]:
    """An Auto Scaling group of ``size`` instances (desired = size; min ``min_size``, else 0) in a subnet of its
    own; answers the ids of its instances."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"]["SubnetId"]
    template = ec2.create_launch_template(LaunchTemplateName=f"{name}-template",
                                          LaunchTemplateData={"ImageId": IMAGE, "InstanceType": "m5.large"})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name, MinSize=0 if min_size is None else min_size, MaxSize=max_size,
        DesiredCapacity=size, VPCZoneIdentifier=subnet,
        LaunchTemplate={"LaunchTemplateId": template["LaunchTemplate"]["LaunchTemplateId"], "Version": "$Latest"})
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0]
    return sorted(i["InstanceId"] for i in group["Instances"])


def lone_instance(ec2) -> str:
    """An instance no group holds."""
    return ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
